"""Process plumbing of the local backend: the launch command line, the job's environment,
signals to a process group, and identifying a pid after an agent restart.

Launch chain (every program execs the next; nothing of the user's is ever interpolated — X3):
    [unshare --net --]  bash -p -c WRAPPER jpu-job STATUS_FILE  [setpriv --reuid … --]
        bash -c LOADER jpu-env ENV_FILE  JOB          (LOADER: env, then `cd $JPU_WORKDIR`)
where JOB is `/bin/bash SCRIPT`, or `apptainer exec … IMAGE /bin/bash SCRIPT` (isolation.py, X4).
Under podman (X4a) the chain is
    bash -p -c WRAPPER jpu-job STATUS_FILE  podman run --user UID:GID … IMAGE
        /bin/bash -c LOADER jpu-env ENV_FILE  /bin/bash SCRIPT
(the runtime, not setpriv, gives the user's UID; the loader runs inside, from the mounted OUT).
A cancel's SIGTERM goes to the container itself (`podman kill`, containers.py), whose init passes
it on to the job; a SIGKILL to the group ends only the client, so whoever ends an attempt removes
its container by name too.
The wrapper stays root (when the agent is root) in the job's process group: it waits for the
job and writes its exit status to a root-owned file, so a restarted agent that is no longer the
parent still learns the exit code. It traps SIGTERM with a no-op (not an ignore, which the job
would inherit), so a cancel reaches the job and the wrapper still records how it ended.
The root side starts with a clean environment of our own (ROOT_ENV): the user's variables
(LD_PRELOAD, BASH_ENV, PATH, GLIBC_TUNABLES, …) would otherwise steer root's unshare, bash or
setpriv. They reach the job through ENV_FILE (the user's, 0600, NUL-separated NAME=value records),
which the loader reads and removes only after the drop to the user's account.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

from jpu.backends import isolation as iso_
from jpu.backends.accounts import Account
from jpu.backends.outputs import read_tail

WRAPPER = (
    "trap ':' TERM\n"
    'status="$1"; shift\n'
    'printf \'%s\\n\' "$EPOCHREALTIME" > "$status.start"\n'  # when the job began, for a restart
    '"$@"\n'
    "rc=$?\n"
    f"PATH={iso_.RUNTIME_PATH}\n"  # the job's PATH is the user's: not for root's own mv
    'printf \'%s\\n\' "$rc" > "$status.tmp" && mv -f "$status.tmp" "$status"\n'
    'exit "$rc"\n'
)
DEFAULT_PATH = iso_.RUNTIME_PATH
ROOT_ENV = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8"}
ENV_FILE = iso_.ENV_FILE
# runs as the job's account: reads the whole file before exporting anything (the user's PATH
# must not find `rm`), removes it, exports each record verbatim (`export -- "$kv"` is no eval),
# then enters the job's working directory as the user (U5: JPU_WORKDIR, its chdir or OUT)
LOADER = (
    'f="$1"; shift\n'
    'mapfile -d "" -t kvs < "$f" && /bin/rm -f -- "$f" || exit 126\n'
    'for kv in "${kvs[@]}"; do export -- "$kv"; done\n'
    f"{iso_.ENTER_WORKDIR}"
    'exec "$@"\n'
)
RESERVED_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "JOB_ATTEMPT",
    "JOB_OUTPUT_DIR",
    "JPU_JOB_ID",
    "JPU_WORKDIR",
)


def system_path(program: str) -> str:
    """Absolute, from the system PATH: the job's env (hence the user's PATH) is the environment
    the root side of the chain starts with, so no root-run program is looked up in it."""
    return shutil.which(program, path=DEFAULT_PATH) or program


def netns_prefix(agent: Account) -> list[str]:
    """The unshare prefix giving a job no network, or [] when the kernel refuses (X4)."""
    unshare = system_path("unshare")
    candidates = [[unshare, "--net", "--"]]
    if not agent.is_root:  # an unprivileged user namespace keeps the job's own UID
        candidates = [[unshare, "--user", "--map-current-user", "--net", "--"]]
    for prefix in candidates:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=10, check=False)
            if done.returncode == 0:
                return prefix
    return []


def resolve_as(account: Account, agent: Account, path: str) -> str | None:
    """SPEC SEC1 at launch: `path` with every symlink followed, resolved *as the job's account*
    (a root agent drops to it in a child: what root could reach is not what the job may), or
    None when the account cannot reach it (a directory on the way it may not enter, or none)."""
    if not agent.is_root or account.uid == agent.uid:
        try:
            return os.path.realpath(path, strict=True)
        except OSError:
            return None
    argv = [
        system_path("setpriv"), f"--reuid={account.uid}", f"--regid={account.gid}",
        "--init-groups", "--no-new-privs", "--", system_path("realpath"), "-e", "--", path,
    ]  # fmt: skip
    try:
        done = subprocess.run(argv, capture_output=True, env=ROOT_ENV, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = done.stdout.decode(errors="surrogateescape").removesuffix("\n")
    return out if done.returncode == 0 and out.startswith("/") else None


def launch_argv(
    status_file: Path,
    output_dir: Path,
    account: Account,
    agent: Account,
    isolation: iso_.Isolation,
    workdir: str | None = None,
    *,
    container: str = "",
    stop_timeout_s: float = 30.0,
    labels: Mapping[str, str] | None = None,
    limits: iso_.Limits | None = None,
) -> list[str]:
    wrapper = [system_path("bash"), "-p", "-c", WRAPPER, "jpu-job", str(status_file)]
    if isolation.podman is not None:
        inner = ["/bin/bash", "-c", LOADER, "jpu-env", str(output_dir / ENV_FILE)]
        inner += iso_.job_argv(isolation, str(output_dir), workdir)
        p = isolation.podman
        if not agent.is_root:  # rootless podman: the user's own UID inside and out
            p = dataclasses.replace(p, args=("--userns=keep-id", *p.args))
        run = iso_.podman_argv(
            p, container, account.uid, account.gid, str(output_dir), workdir, inner,
            stop_timeout_s, labels, limits,
        )  # fmt: skip
        return [*wrapper, *run]
    drop = []
    if agent.is_root:
        drop = [
            system_path("setpriv"),
            f"--reuid={account.uid}",
            f"--regid={account.gid}",
            "--init-groups",
            "--no-new-privs",
            "--",
        ]
    return [
        *isolation.netns,
        *wrapper,
        *drop,
        system_path("bash"),
        "-c",
        LOADER,
        "jpu-env",
        str(output_dir / ENV_FILE),
        *iso_.job_argv(isolation, str(output_dir), workdir),
    ]


def env_records(env: Mapping[str, str]) -> bytes:
    """NUL-separated NAME=value records: no value is ever parsed by a shell or split."""
    return b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items())


def job_env(
    *,
    job_id: str,
    attempt: int,
    gpus: list[int],
    output_dir: str,
    account: Account,
    user_env: Mapping[str, str],
    workdir: str | None = None,
) -> dict[str, str]:
    """A clean environment (nothing of the agent's leaks in), the user's env, then the platform
    variables of SPEC X2 (and JPU_WORKDIR, U5), which the user's env can never override."""
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": output_dir,  # system accounts have no home; the attempt's dir stands in
        "USER": account.name,
        "LOGNAME": account.name,
        "SHELL": "/bin/bash",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    env.update(user_env)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
            "JOB_ATTEMPT": str(attempt),
            "JOB_OUTPUT_DIR": output_dir,
            "JPU_JOB_ID": job_id,
            "JPU_WORKDIR": workdir or output_dir,
        }
    )
    return env


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot: with the pid, identifies it across a
    restart (a recycled pid has another start time). None when the pid does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 of proc(5); fields[0] is field 3


def started_at(ticks: int) -> float:
    """The wall-clock time a process with these start ticks started (to ~10 ms)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def find_wrapper(status_file: Path) -> tuple[int, int] | None:
    """(pid, start ticks) of the live wrapper of an attempt, found by its status file, which is on
    its command line (launch_argv): how a restarted agent adopts an attempt that was spawned by
    an agent that died before saving the pid. None when no such process runs."""
    needle = os.fsencode(str(status_file))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle in argv:
            pid = int(entry)
            ticks = start_ticks(pid)
            if ticks is not None and is_alive(pid, ticks):
                return pid, ticks
    return None


def is_alive(pid: int, ticks: int) -> bool:
    """The same process still exists and has not exited (a zombie has exited: PID 1 of a
    container may never reap the orphans of a dead agent)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    rest = stat[stat.rindex(")") + 2 :].split()
    return rest[0] not in ("Z", "X") and int(rest[19]) == ticks


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Signal the job's whole process group; False when nothing is left to signal."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def start_file(status_file: Path) -> Path:
    """Where the wrapper writes when the job began (epoch seconds), next to its exit status."""
    return status_file.with_name(status_file.name + ".start")


def read_start(status_file: Path) -> float | None:
    """When the job began, as its wrapper wrote it: an attempt that ended while no agent
    watched (its pid unsaved) still has its run time (F5), not only startup time."""
    try:
        return float(start_file(status_file).read_text().strip().replace(",", "."))
    except (OSError, ValueError):
        return None


def clear_status(status_file: Path) -> None:
    """Before a (re)launch under one backend job id: no stale exit status or start time."""
    for path in (status_file, start_file(status_file)):
        path.unlink(missing_ok=True)


def read_status(path: Path) -> tuple[int | None, float | None]:
    """(exit code, when it was written) from the wrapper's status file, if it exists."""
    try:
        text = path.read_text().strip()
        return int(text), path.stat().st_mtime
    except (OSError, ValueError):
        return None, None


def tail(paths: list[Path], limit: int = 64 * 1024) -> str:
    return "\n".join(read_tail(p, limit) for p in paths)
