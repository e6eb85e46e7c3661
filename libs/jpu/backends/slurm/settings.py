"""The Slurm backend's settings (SPEC X9), in a module of their own: the backend and its parts
(the backfill jobs, the escalator) read them without importing each other. `timeout_grace_s`
applies to sub-minute time limits only: Slurm ends a job at a whole-minute limit itself."""

from __future__ import annotations

from dataclasses import dataclass

from jpu.backends.settings import BackendSettings


@dataclass(frozen=True)
class SlurmSettings(BackendSettings):
    conf: str | None = None  # SLURM_CONF for the CLI; None: the machine's default
    refresh_s: float = 0.25  # oldest squeue snapshot a poll accepts
    refresh_cost_factor: float = 10.0  # …or factor × a refresh's own wall time, when longer
    listing: str = "lean"  # lean: poll through SQUEUE_FORMAT | json: every look `squeue --json`
    pyslurm: str = "auto"  # auto: read jobs through pyslurm where it matches the cluster | off
    backfill_partition: str = "llm"  # SPEC B1: the preemptible partition (PriorityTier below)
    backfill_cpus: int = 1  # per LLM instance: small, so it never blocks a research job's CPUs
    backfill_mem_gb: int = 1
    # a start burst (every GPU after a drain): this many `sbatch` in flight at once; one attempt
    # is still submitted at most once (a lock per Slurm job name, and the record before sbatch)
    submit_concurrency: int = 8
