"""One attempt → an `sbatch` call (SPEC X1, X2, X3). Pure.

* X1: the tier's partition, pinned to the placement's node, `--gres=gpu:<tier>:<n>`, CPUs and
  memory proportional to the GPUs, the time limit (whole minutes: Slurm's unit; a limit that is
  not a whole number of minutes is also enforced to the second by the backend).
* X2: the environment (the user's env, then JOB_ATTEMPT, JOB_OUTPUT_DIR, JPU_JOB_ID, which the
  user's env cannot override) goes through an inherited fd as NUL-separated NAME=value records
  (`--export=NIL --export-file=<fd>`): no value is ever parsed by a shell or split on commas.
  CUDA_VISIBLE_DEVICES is Slurm's to set, from the GPUs it allocated.
* X3: the command is the file `job.sh` in JOB_OUTPUT_DIR; the batch script sbatch reads on
  stdin is a constant wrapper that execs it (exec: the signals of a cancel reach the job itself).
* U5: `--chdir` stays JOB_OUTPUT_DIR (Slurm's WorkDir is how a restarted agent finds an adopted
  attempt's files); the wrapper then enters JPU_WORKDIR — the job's chdir — as the user, and
  fails the job with a clear line on stderr when it cannot (Slurm would silently use /tmp).
* X4a: under podman the wrapper hands the step's environment to the node's root helper
  (podman_job.py) through OUT/.jpu-env and execs it through sudo; a job naming a workspace runs
  in the image resolved at submit, with its packages first on PATH.
* X4: under Apptainer the wrapper execs `apptainer exec --containall … /bin/bash job.sh` and the
  export file carries the job's variables as APPTAINERENV_<NAME> (isolation.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from jpu.backends import isolation as iso_
from jpu.backends import supervise
from jpu.backends.base import LaunchSpec
from jpu.backends.process import DEFAULT_PATH, env_records
from jpu.backends.workspaces import venv_env

NAME_PREFIX = "jpu-"
_PLATFORM = ("JOB_ATTEMPT", "JOB_OUTPUT_DIR", "JPU_JOB_ID", "JPU_WORKDIR")
_SLURM_OWNED = ("CUDA_VISIBLE_DEVICES",)


def job_name(job_id: str, attempt: int) -> str:
    """How `find` recognizes an attempt in Slurm (the job name survives an agent restart)."""
    return f"{NAME_PREFIX}{job_id}-{attempt}"


def wrapper(isolation: iso_.Isolation) -> bytes:
    """The batch script: constant per isolation; only our own words, never user text."""
    return (
        "#!/bin/bash\n"
        "# JPU-Share batch wrapper: the job's command is job.sh in JOB_OUTPUT_DIR (SPEC X3).\n"
        + iso_.slurm_wrapper_line(isolation)
    ).encode()


def job_env(
    spec: LaunchSpec, account_name: str, isolation: iso_.Isolation = iso_.NONE
) -> dict[str, str]:
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": spec.output_dir,  # system accounts have no home; the attempt's dir stands in
        "USER": account_name,
        "LOGNAME": account_name,
        "SHELL": "/bin/bash",
        "LANG": "C.UTF-8",
    }
    env.update(
        (k, v)
        for k, v in spec.env.items()
        if k and "=" not in k and "\0" not in k + v and k not in _SLURM_OWNED
    )
    env.update(
        {
            "JOB_ATTEMPT": str(spec.attempt),
            "JOB_OUTPUT_DIR": spec.output_dir,
            "JPU_JOB_ID": spec.job_id,
            "JPU_WORKDIR": spec.workdir,  # U5: the wrapper enters it as the user
        }
    )
    # U7: the platform's SLURM_* over Slurm's where they differ (renamed inside the step); U6
    # -o/-e/--signal; srun: Slurm's own where it can reach slurmctld (no isolation), else the
    # shim: a job without network or in a container cannot use it (jpu.backends.supervise)
    env.update(supervise.slurm_overrides(spec))
    shim = "absent" if isolation.name == iso_.NONE.name else "always"
    env.update(supervise.run_env(spec, forward=isolation.podman is not None, srun=shim))
    if spec.workspace is not None:  # X4a: the workspace's packages first on PATH
        env = venv_env(env, spec.env)
    return iso_.job_env(isolation, env)


def export_file(env: Mapping[str, str]) -> bytes:
    return env_records(env)


def time_minutes(time_limit_s: float | None) -> int | None:
    """Slurm's limit in whole minutes, rounded up (the backend enforces the exact second)."""
    if time_limit_s is None or time_limit_s <= 0:
        return None
    return max(1, math.ceil(time_limit_s / 60.0))


def enforced_by_backend(time_limit_s: float | None) -> bool:
    """A whole-minute limit is Slurm's to enforce (state TIMEOUT); anything finer is ours."""
    return time_limit_s is not None and time_limit_s > 0 and time_limit_s % 60 != 0


def sbatch_argv(spec: LaunchSpec, env_fd: int, comment: str) -> list[str]:
    """X1. The user's command and env are not in here: only ids, numbers and our own paths."""
    out = spec.output_dir
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job_name(spec.job_id, spec.attempt)}",
        f"--partition={spec.partition or spec.tier}",
        f"--nodelist={spec.node}",
        "--nodes=1",
        "--ntasks=1",
        f"--gres=gpu:{spec.tier}:{spec.num_gpus}",
        f"--cpus-per-task={max(spec.cpus, 1)}",
        f"--mem={max(spec.mem_gb, 1)}G",
        "--no-requeue",  # the platform, not Slurm, decides retries (X8)
        "--open-mode=append",
        f"--chdir={out}",
        f"--output={out}/stdout",
        f"--error={out}/stderr",
        "--export=NIL",
        f"--export-file={env_fd}",
        f"--comment={comment}",
    ]
    minutes = time_minutes(spec.time_limit_s)
    if minutes is not None:
        argv.append(f"--time={minutes}")
    return argv
