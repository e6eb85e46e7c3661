"""A dispatched attempt → the backend's LaunchSpec (SPEC X1, X2). Pure."""

from __future__ import annotations

from pathlib import Path

from jpu.backends import LaunchSpec
from jpu.backends.joblogs import attempt_dir
from jpu.config import Tier
from jpu.domain.execution import AgentJob


def output_dir(root: Path, job_id: str, attempt: int) -> Path:
    """JOB_OUTPUT_DIR: one directory per job and attempt (X2); the gateway reads it (joblogs)."""
    return attempt_dir(root, job_id, attempt)


def launch_spec(job: AgentJob, tier: Tier, output_root: Path) -> LaunchSpec:
    d, s = job.dispatched, job.submitted
    assert d is not None, "only a dispatched attempt is launched"
    n = len(d.gpus) or s.num_gpus
    return LaunchSpec(
        job_id=s.job_id,
        attempt=d.attempt,
        user=s.user,
        node=d.node,
        tier=d.tier,
        gpus=list(d.gpus),
        num_gpus=n,
        command=s.command,
        env=dict(s.env),
        time_limit_s=float(s.time_limit_s) if s.time_limit_s else None,
        cpus=n * tier.cpus_per_gpu,  # X1: CPU and RAM proportional to the GPUs
        mem_gb=n * tier.mem_gb_per_gpu,
        output_dir=str(output_dir(output_root, s.job_id, d.attempt)),
        chdir=s.chdir,  # U5: where it was submitted from (None: JOB_OUTPUT_DIR)
        partition=tier.partition,
        workspace=s.workspace,  # X4a: runs in that workspace's image, resolved at submit
        workspace_image=s.workspace_image,
        name=s.name,  # U6/U7: sbatch's meanings at execution (jpu.domain.slurm_io, slurm_env)
        output=s.output,
        error=s.error,
        open_mode=s.open_mode,
        signal=s.signal,
        array_job_id=s.array.array_id if s.array is not None else None,
        array_task_id=s.array.tasks[0] if s.array is not None and s.array.array_id else None,
    )
