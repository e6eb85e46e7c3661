"""SPEC X4: which isolation a job gets, and the argv/env that give it. Shared by both backends.

Modes (`isolation` in the configuration):
  container  an OCI container (`container_runtime`: podman, or apptainer as below), or a clear
             BackendError at start when the runtime or its image is missing (X4a: never a
             silent weaker fallback).
  uid-netns  the user's own Unix account and a network namespace when the kernel allows one.
  auto       Apptainer when `apptainer_image` is set, else as uid-netns (the older default).
  apptainer  Apptainer, or a clear BackendError at start.
  none       nothing beyond the user's own Unix account.

Under podman (rootful, so `--user` is the host's own UID) the script runs as
    podman [--root STORE] run --rm --name jpu-BACKEND_ID --init --network=none --pid=private
        --user UID:GID --read-only --log-driver=passthrough --stop-timeout GRACE
        --volume OUT:OUT:rw [--volume WORKDIR:WORKDIR:rw] [--volume SHARED:SHARED:ro …]
        IMAGE INNER…
where INNER is the local backend's loader (process.py), run inside as the user. `--init` puts
a small init as PID 1 that passes SIGTERM on to the job (a shell as PID 1 would ignore it).

Under Apptainer the script runs as
    apptainer exec --containall --net --network none --no-eval --bind OUT [--bind WORKDIR]
        --pwd WORKDIR [args] IMAGE /bin/bash OUT/job.sh
(WORKDIR: the job's `chdir`, SPEC U5, else OUT) as the user's mapped account (the
setpriv/runuser drop stays outside). `--containall` implies `--cleanenv`, so the job's
variables travel as APPTAINERENV_<NAME> in apptainer's environment (no shell line, no file the
runtime would source), and `--no-eval` makes the runtime quote them instead of evaluating
`$(…)` in them (SPEC X3). Everything here is pure except the `check_*` functions.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jpu.backends.base import BackendError
from jpu.backends.supervise import ARGV as SUPERVISOR

MODES = ("container", "uid-netns", "none", "auto", "apptainer")
RUNTIMES = ("podman", "apptainer")
BASE_IMAGE = "localhost/jpu-base:bookworm"  # what scripts/install-podman builds
CONTAINER_PREFIX = "jpu-"  # podman containers are named after the attempt: jpu-<backend id>
WORKSPACE_IMAGE_PREFIX = "localhost/jpu-ws-"  # the builder's images (workspaces.image_of)
# the node's root helper a Slurm batch script runs podman through (podman_job.py)
SLURM_HELPER = "/usr/local/libexec/jpu-podman-job"
ENV_PREFIX = "APPTAINERENV_"
# apptainer's own environment: what it needs to run, and JOB_OUTPUT_DIR for the Slurm wrapper;
# its PATH is ours, never the user's (the user's PATH goes in as APPTAINERENV_PATH)
RUNTIME_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV_FILE = ".jpu-env"  # the job's variables, NUL-separated, read by process.LOADER
RUNTIME_KEYS = ("LANG", "USER", "LOGNAME", "SHELL", "JOB_OUTPUT_DIR", "JPU_WORKDIR")
# the runtime refuses to override these from APPTAINERENV_ (it sets HOME itself)
NOT_FORWARDED = frozenset({"HOME"})
# set by Slurm in the batch step, forwarded into the container by the batch wrapper
FROM_SLURM = ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID")
OUT_VAR = "$JOB_OUTPUT_DIR"  # the Slurm wrapper's word for the output directory
WORK_VAR = "$JPU_WORKDIR"  # …and for the directory the job runs in (U5)
_EXTRA_BIND = '"$@"'  # the wrapper's `--bind WORKDIR`, set only when it is not OUT
# U5: the job starts in its working directory, entered as the user (a directory the user may
# not enter fails the job with this line on its stderr, never runs it elsewhere)
ENTER_WORKDIR = (
    'JPU_WORKDIR="${JPU_WORKDIR:-$JOB_OUTPUT_DIR}"\n'
    'cd -- "$JPU_WORKDIR" || { echo "jpu: cannot run in $JPU_WORKDIR (chdir)" >&2; exit 1; }\n'
)


@dataclass(frozen=True)
class Apptainer:
    image: str  # a SIF file or a sandbox directory, built beforehand (with network)
    bin: str = "apptainer"
    args: tuple[str, ...] = ()  # extra `exec` options, e.g. ("--nv",) on NVIDIA nodes


@dataclass(frozen=True)
class Podman:
    image: str  # the base image (or a workspace image), present in the store beforehand
    bin: str = "podman"
    storage: str = ""  # podman's --root; "": its default store
    shared: tuple[str, ...] = ()  # admin-declared host paths, mounted read-only
    args: tuple[str, ...] = ()  # extra `run` options, e.g. ("--device", "nvidia.com/gpu=0")
    helper: str = SLURM_HELPER  # on Slurm nodes: the root helper that runs podman_argv
    seccomp: str = ""  # SEC6: the profile refusing nested user namespaces (seccomp.py)


# SEC6: what a job's container may use besides its tier's memory and CPUs (podman's --pids-limit,
# and its /tmp: a tmpfs, whose pages count against the memory limit, never above it)
PIDS_LIMIT = 4096
TMP_MB = 4096


@dataclass(frozen=True)
class Limits:
    """SPEC SEC6: what the tier promises (mem_gb_per_gpu × GPUs, cpus_per_gpu × GPUs, the
    LaunchSpec's mem_gb and cpus) as enforced limits, bounded pids and /tmp."""

    mem_gb: int
    cpus: int
    pids: int = PIDS_LIMIT
    tmp_mb: int = TMP_MB

    def podman_args(self) -> list[str]:
        mem = f"{max(self.mem_gb, 1)}g"
        tmp_mb = min(self.tmp_mb, max(self.mem_gb, 1) * 1024)
        return [
            "--memory", mem, "--memory-swap", mem,  # no swap beyond the promise
            "--cpus", str(max(self.cpus, 1)), "--pids-limit", str(self.pids),
            "--tmpfs", f"/tmp:rw,size={tmp_mb}m,mode=1777,nosuid,nodev",
        ]  # fmt: skip


@dataclass(frozen=True)
class Isolation:
    """What one job gets. `netns` is an unshare prefix; `container` the Apptainer settings,
    `podman` the podman ones."""

    # recorded with the job: "container:podman" | "container:apptainer" | "uid+netns" | "none"
    name: str
    netns: tuple[str, ...] = ()
    container: Apptainer | None = None
    podman: Podman | None = None


NONE = Isolation("none")
PODMAN = "container:podman"
APPTAINER = "container:apptainer"
UID_NETNS = "uid+netns"


def wants(mode: str, apptainer: Apptainer | None, runtime: str = "podman") -> str:
    """The isolation a mode asks for: "podman", "apptainer", "netns" (if the kernel allows) or
    "none"."""
    if mode not in MODES:
        raise BackendError(f"isolation: {mode!r} is not one of {' | '.join(MODES)}")
    if mode == "container" and runtime not in RUNTIMES:
        raise BackendError(f"container_runtime: {runtime!r} is not one of {' | '.join(RUNTIMES)}")
    if mode == "container" and runtime == "podman":
        return "podman"
    if mode in ("apptainer", "container") and apptainer is None:
        raise BackendError("isolation: apptainer needs apptainer_image (a SIF file or sandbox)")
    if mode in ("none", "uid-netns"):
        return mode.replace("uid-", "")
    return "apptainer" if apptainer is not None else "netns"


def netns(prefix: Sequence[str]) -> Isolation:
    return Isolation(UID_NETNS, tuple(prefix)) if prefix else NONE


def container(apptainer: Apptainer) -> Isolation:
    return Isolation(APPTAINER, container=apptainer)


def podman(settings: Podman) -> Isolation:
    return Isolation(PODMAN, podman=settings)


def container_name(backend_job_id: str) -> str:
    """The podman container of an attempt: found again by this name after an agent restart."""
    return CONTAINER_PREFIX + backend_job_id


def podman_base(p: Podman) -> list[str]:
    """`podman [--root STORE]`: every podman command of the platform uses the same store."""
    return [p.bin, *(["--root", p.storage] if p.storage else [])]


def podman_argv(
    p: Podman,
    name: str,
    uid: int,
    gid: int,
    output_dir: str,
    workdir: str | None,
    inner: Sequence[str],
    stop_timeout_s: float,
    labels: Mapping[str, str] | None = None,
    limits: Limits | None = None,
) -> list[str]:
    """`podman run` of one attempt (X4a): no network, the user's UID/GID, a read-only root,
    only OUT and the working directory writable, admin-declared paths read-only, and the host's
    processes out of sight (a private PID namespace); SEC6: the tier's memory and CPUs, bounded
    pids and /tmp, no nested user namespaces (p.seccomp)."""
    wd = workdir or output_dir
    volumes = ["--volume", f"{output_dir}:{output_dir}:rw"]
    if wd != output_dir:
        volumes += ["--volume", f"{wd}:{wd}:rw"]
    for path in p.shared:
        volumes += ["--volume", f"{path}:{path}:ro"]
    return [
        *podman_base(p), "run", "--rm", "--name", name, "--init", "--network=none",
        "--pid=private", "--ipc=private", "--user", f"{uid}:{gid}", "--read-only",
        "--security-opt", "no-new-privileges", "--cap-drop=all",
        *(["--security-opt", f"seccomp={p.seccomp}"] if p.seccomp else []),
        *(limits.podman_args() if limits is not None else []),
        "--log-driver=passthrough", "--stop-timeout", str(max(1, math.ceil(stop_timeout_s))),
        *(w for k, v in (labels or {}).items() for w in ("--label", f"{k}={v}")),
        *volumes, "--workdir", wd, *p.args, p.image, *inner,
    ]  # fmt: skip


def job_argv(isolation: Isolation, output_dir: str, workdir: str | None = None) -> list[str]:
    """The command that runs OUT/job.sh (after any account drop; the netns prefix is apart).
    Under Apptainer `workdir` (default OUT) is bound too and is the container's working dir.
    The supervisor (jpu.backends.supervise, U6/U7) runs the script, inside any container."""
    script = [*SUPERVISOR, "/bin/bash", f"{output_dir}/job.sh"]
    a = isolation.container
    if a is None:
        return script
    wd = workdir or output_dir
    binds = ["--bind", output_dir] + (["--bind", wd] if wd != output_dir else [])
    return [
        a.bin, "exec", "--containall", "--net", "--network", "none", "--no-eval",
        *binds, "--pwd", wd, *a.args, a.image, *script,
    ]  # fmt: skip


def job_env(isolation: Isolation, env: Mapping[str, str]) -> dict[str, str]:
    """The environment to start `job_argv` with: as is, or for Apptainer the runtime's own
    variables plus every job variable as APPTAINERENV_<NAME> (none reaches apptainer raw)."""
    if isolation.container is None:
        return dict(env)
    outside = {"PATH": RUNTIME_PATH, **{k: env[k] for k in RUNTIME_KEYS if k in env}}
    outside.update((ENV_PREFIX + k, v) for k, v in env.items() if k not in NOT_FORWARDED)
    return outside


def slurm_wrapper_line(isolation: Isolation) -> str:
    """The batch wrapper's lines (SPEC X3: only our own words; the operator's image and
    options are shell-quoted; the output dir is the variable Slurm's --export-file set)."""
    if isolation.podman is not None:
        lines = [*ENTER_WORKDIR.splitlines(), *_slurm_podman_lines(isolation.podman)]
        return "".join(f"{line}\n" for line in lines)
    lines = []
    if isolation.container is not None:  # --cleanenv: Slurm's GPU variables go in explicitly
        lines += [
            f'if [ -n "${{{k}+x}}" ]; then export {ENV_PREFIX}{k}="${k}"; fi' for k in FROM_SLURM
        ]
    lines += ENTER_WORKDIR.splitlines()
    words = [*isolation.netns, *job_argv(isolation, OUT_VAR, WORK_VAR)]
    if isolation.container is not None:  # bind the working directory once, unless it is OUT
        lines.append(
            f'set --; if [ "{WORK_VAR}" != "{OUT_VAR}" ]; then set -- --bind "{WORK_VAR}"; fi'
        )
        at = next(i for i in range(len(words) - 1) if words[i : i + 2] == ["--bind", WORK_VAR])
        words[at : at + 2] = [_EXTRA_BIND]
    lines.append("exec " + " ".join(_shell_word(w) for w in words))
    return "".join(f"{line}\n" for line in lines)


def _slurm_podman_lines(p: Podman) -> list[str]:
    """X4a in the allocation: the batch step runs as the user, so the node's root helper
    (podman_job.py, through sudo) runs the one `podman run` of the platform as the caller's
    UID/GID. The step's environment (the export file's variables, Slurm's CUDA_VISIBLE_DEVICES
    and SLURM_JOB_ID) goes to the job through OUT/.jpu-env, written here as the user (0600) and
    read inside by the loader: none of it reaches root's podman. exec: Slurm's signals reach
    sudo, which relays them to podman, which passes them into the container."""
    return [
        f'umask 077; env -0 -u _ -u SHLVL -u OLDPWD > "{OUT_VAR}/{ENV_FILE}" || exit 126',
        f"exec sudo -n -- {shlex.quote(p.helper)} run"
        f' "$SLURM_JOB_ID" "{OUT_VAR}" "{WORK_VAR}" {shlex.quote(p.image)}',
    ]


def _shell_word(word: str) -> str:
    if word == _EXTRA_BIND:
        return word
    if word in (OUT_VAR, f"{OUT_VAR}/job.sh", WORK_VAR):
        return f'"{word}"'  # our own $JOB_OUTPUT_DIR[/job.sh] / $JPU_WORKDIR, expanded there
    return shlex.quote(word)


def check_podman(p: Podman) -> None:
    """X4a: the runtime and the image are there at start, or the agent refuses to start."""
    if shutil.which(p.bin) is None:
        raise BackendError(
            f"isolation: container needs {p.bin!r} (container_runtime: podman), which is not an "
            "executable on PATH: run scripts/install-podman, or set isolation: uid-netns"
        )
    try:
        done = subprocess.run(
            [*podman_base(p), "image", "exists", p.image], capture_output=True, timeout=60
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        raise BackendError(f"isolation: container: podman does not answer: {e}") from e
    if done.returncode != 0:
        raise BackendError(
            f"isolation: container_image {p.image!r} is not in podman's image store "
            "(scripts/install-podman builds the base image)"
        )


def check_apptainer(apptainer: Apptainer) -> None:
    """Configured but unusable is an error at start, not a silent weaker isolation (X4)."""
    if shutil.which(apptainer.bin) is None:
        raise BackendError(
            f"isolation: apptainer_bin {apptainer.bin!r} is not an executable on PATH"
        )
    if not os.path.exists(apptainer.image):
        raise BackendError(f"isolation: apptainer_image {apptainer.image!r} does not exist")
