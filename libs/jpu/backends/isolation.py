"""SPEC X4: which isolation a job gets, and the argv/env that give it. Shared by both backends.

Modes (`isolation` in the configuration):
  auto       Apptainer when `apptainer_image` is set, else a network namespace when the kernel
             allows one (`unshare --net`), else none.
  apptainer  Apptainer, or a clear BackendError at start (never a silent weaker fallback).
  none       nothing beyond the user's own Unix account.

Under Apptainer the script runs as
    apptainer exec --containall --net --network none --no-eval --bind OUT [--bind WORKDIR]
        --pwd WORKDIR [args] IMAGE /bin/bash OUT/job.sh
(WORKDIR: the job's `chdir`, SPEC U5, else OUT) as the user's mapped account (the
setpriv/runuser drop stays outside). `--containall` implies `--cleanenv`, so the job's
variables travel as APPTAINERENV_<NAME> in apptainer's environment (no shell line, no file the
runtime would source), and `--no-eval` makes the runtime quote them instead of evaluating
`$(…)` in them (SPEC X3). Everything here is pure except `check_apptainer`.
"""

from __future__ import annotations

import os
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jpu.backends.base import BackendError

MODES = ("auto", "apptainer", "none")
ENV_PREFIX = "APPTAINERENV_"
# apptainer's own environment: what it needs to run, and JOB_OUTPUT_DIR for the Slurm wrapper;
# its PATH is ours, never the user's (the user's PATH goes in as APPTAINERENV_PATH)
RUNTIME_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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
class Isolation:
    """What one job gets. `netns` is an unshare prefix; `container` the Apptainer settings."""

    name: str  # recorded with the job: "apptainer" | "netns" | "none"
    netns: tuple[str, ...] = ()
    container: Apptainer | None = None


NONE = Isolation("none")


def wants(mode: str, apptainer: Apptainer | None) -> str:
    """The isolation a mode asks for: "apptainer", "netns" (if the kernel allows) or "none"."""
    if mode not in MODES:
        raise BackendError(f"isolation: {mode!r} is not one of {' | '.join(MODES)}")
    if mode == "apptainer" and apptainer is None:
        raise BackendError("isolation: apptainer needs apptainer_image (a SIF file or sandbox)")
    if mode == "none":
        return "none"
    return "apptainer" if apptainer is not None else "netns"


def netns(prefix: Sequence[str]) -> Isolation:
    return Isolation("netns", tuple(prefix)) if prefix else NONE


def container(apptainer: Apptainer) -> Isolation:
    return Isolation("apptainer", container=apptainer)


def job_argv(isolation: Isolation, output_dir: str, workdir: str | None = None) -> list[str]:
    """The command that runs OUT/job.sh (after any account drop; the netns prefix is apart).
    Under Apptainer `workdir` (default OUT) is bound too and is the container's working dir."""
    script = ["/bin/bash", f"{output_dir}/job.sh"]
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


def _shell_word(word: str) -> str:
    if word == _EXTRA_BIND:
        return word
    if word in (OUT_VAR, f"{OUT_VAR}/job.sh", WORK_VAR):
        return f'"{word}"'  # our own $JOB_OUTPUT_DIR[/job.sh] / $JPU_WORKDIR, expanded there
    return shlex.quote(word)


def check_apptainer(apptainer: Apptainer) -> None:
    """Configured but unusable is an error at start, not a silent weaker isolation (X4)."""
    if shutil.which(apptainer.bin) is None:
        raise BackendError(
            f"isolation: apptainer_bin {apptainer.bin!r} is not an executable on PATH"
        )
    if not os.path.exists(apptainer.image):
        raise BackendError(f"isolation: apptainer_image {apptainer.image!r} does not exist")
