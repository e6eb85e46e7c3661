"""pyslurm as the Slurm backend's job reader, where it matches the cluster (SPEC X9).

pyslurm builds only against its own Slurm release (25.11 today; SLURM-NOTES: it refuses 22.05),
so it is used only when `import pyslurm` works *and* its Slurm major.minor is the cluster's. It
replaces the hot path — the job snapshot every poll reads (`squeue --json`) — with one
slurm_load_jobs RPC. Submission stays sbatch (the script on stdin and the environment through an
fd are what keep user text off every command line, X3), and so do cancel and inventory.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from jpu.backends.slurm.cli import SlurmCli
from jpu.backends.slurm.parse import SlurmJob


def _major_minor(version: str) -> str | None:
    found = re.search(r"(\d+)\.(\d+)", version)
    return f"{int(found.group(1))}.{int(found.group(2))}" if found else None


async def cluster_version(cli: SlurmCli) -> str:
    """ "22.05" from `sinfo --version` ("slurm 22.05.8")."""
    _, out, _ = await cli.run(["sinfo", "--version"])
    return _major_minor(out) or out.strip()


def pyslurm_usable(cluster: str) -> tuple[bool, str]:
    """(usable, why): pyslurm importable and built for the cluster's Slurm major.minor."""
    try:
        import pyslurm  # optional; its import needs a matching libslurm
    except Exception as e:  # ImportError, or libslurm's own failure to load
        return False, f"pyslurm is not importable here: {e}"
    built_for = _major_minor(str(getattr(pyslurm, "__version__", "")))
    if built_for != _major_minor(cluster):
        return False, f"pyslurm {built_for} does not match the cluster's Slurm {cluster}"
    return True, f"pyslurm {built_for} matches Slurm {cluster}"


def job_from_pyslurm(job: Any) -> SlurmJob:
    """A pyslurm.Job (23.02+ API) → our SlurmJob (raw wait status rebuilt from its parts)."""
    code, sig = getattr(job, "exit_code", None), getattr(job, "exit_code_signal", None)
    raw = None
    if sig:
        raw = int(sig) & 0x7F
    elif code is not None:
        raw = (int(code) & 0xFF) << 8
    return SlurmJob(
        job_id=int(job.id), name=str(job.name or ""), state=str(job.state or "PENDING"),
        reason=str(job.state_reason or ""), user=str(job.user_name or ""),
        node=str(job.allocated_nodes or job.batch_host or "") or None,
        partition=str(job.partition or ""), exit_status=raw,
        start_time=float(job.start_time) if job.start_time else None,
        end_time=float(job.end_time) if job.end_time else None,
        stdout=str(job.standard_output or ""), stderr=str(job.standard_error or ""),
        workdir=str(job.working_directory or ""),
    )  # fmt: skip


async def load_jobs(prefix: str) -> dict[int, SlurmJob]:
    """Our jobs (by name prefix) through one RPC; run in a thread (pyslurm blocks)."""

    def load() -> dict[int, SlurmJob]:
        import pyslurm

        jobs = (job_from_pyslurm(j) for j in pyslurm.Jobs.load().values())
        return {j.job_id: j for j in jobs if j.name.startswith(prefix)}

    return await asyncio.to_thread(load)
