"""The podman containers of local attempts, by name (SPEC X4a, X5, O5): ending one and finding
the ones a store started. Each attempt's container is named after it (isolation.container_name)
and labelled with the record store that started it, so a restarted agent finds its own
containers (never another agent's on the same machine) and ends those no unfinished attempt
owns. A SIGKILL reaches only the podman client of an attempt: ending the container is `rm -f`.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Sequence
from typing import Literal

log = logging.getLogger(__name__)

LABEL = "jpu.records"  # the record store (a directory) that started the container
_TIMEOUT_S = 60.0


def remove(podman: Sequence[str], name: str) -> bool:
    """Kill and remove the container (no grace: the grace was the job's, before this). True when
    it is gone (or never existed)."""
    argv = [*podman, "rm", "--force", "--ignore", "--time", "0", name]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.error("cannot remove container %s: %s", name, e)
        return False
    if done.returncode != 0:
        log.error("cannot remove container %s: %s", name, done.stderr.strip())
    return done.returncode == 0


def kill(podman: Sequence[str], name: str, sig: str = "TERM") -> bool:
    """Send `sig` to the container's init, which passes it to the job (X5). False when it did
    not arrive: the container is not (yet, or any more) running, or podman did not answer."""
    argv = [*podman, "kill", "--signal", sig, name]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("cannot signal container %s: %s", name, e)
        return False
    # podman names the container it signalled; one interrupted by a signal of its own (on Slurm,
    # `scancel --full` signals the helper's children too) can exit 0 having done and said nothing
    return done.returncode == 0 and name in done.stdout.split()


class EngineError(Exception):
    """podman did not answer (it timed out, failed or was killed)."""


def state(podman: Sequence[str], name: str) -> Literal["running", "gone"] | int:
    """ "running", the exit code once it has ended, or "gone" (`--rm` removed it, or it never
    existed); EngineError when podman did not say."""
    argv = [*podman, "container", "inspect", "--format", "{{.State.Running}} {{.State.ExitCode}}"]
    try:
        done = subprocess.run([*argv, name], capture_output=True, text=True, timeout=_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EngineError(str(e)) from e
    if done.returncode != 0:
        if "no such container" in done.stderr:
            return "gone"
        raise EngineError(done.stderr.strip() or f"podman exited {done.returncode}")
    # exit 0 with nothing said: podman was interrupted by a signal (on Slurm, `scancel --full`
    # reaches the helper's children too) before it answered, which is not an answer
    said = done.stdout.split()
    if len(said) != 2 or said[0] not in ("true", "false") or not said[1].lstrip("-").isdigit():
        raise EngineError(f"podman said {done.stdout.strip()!r} of {name}")
    return "running" if said[0] == "true" else int(said[1])


def owned(podman: Sequence[str], records: str) -> list[str] | None:
    """Names of the containers (running or not) a record store started; None when podman does
    not answer."""
    argv = [*podman, "ps", "--all", "--filter", f"label={LABEL}={records}"]
    try:
        done = subprocess.run(
            [*argv, "--format", "{{.Names}}"], capture_output=True, text=True, timeout=_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.error("cannot list containers: %s", e)
        return None
    if done.returncode != 0:
        log.error("cannot list containers: %s", done.stderr.strip())
        return None
    return done.stdout.split()
