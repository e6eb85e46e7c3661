"""The Slurm backend's settings (SPEC X9), in a module of their own: the backend and its parts
(the backfill jobs, the escalator) read them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jpu.backends import isolation as iso_
from jpu.backends.workspaces import PipSite


@dataclass(frozen=True)
class SlurmSettings:
    data_dir: Path
    conf: str | None = None  # SLURM_CONF for the CLI; None: the machine's default
    timeout_grace_s: float = 30.0  # SIGTERM → SIGKILL when a sub-minute time limit is hit
    kill_failed_after_s: float = 300.0  # X5
    isolation: str = "auto"  # X4: auto | apptainer | none (isolation.py)
    apptainer: iso_.Apptainer | None = None  # set: Apptainer is configured
    container_runtime: str = "podman"  # X4a: for isolation: container
    podman: iso_.Podman = field(default_factory=lambda: iso_.Podman(iso_.BASE_IMAGE))
    pip: PipSite = field(default_factory=PipSite)  # X4a: what a workspace build passes to pip
    account_template: str = "jpu-{user}"
    create_accounts: bool = True
    fallback_account: str = "nobody"
    refresh_s: float = 0.25  # oldest squeue snapshot a poll accepts
    refresh_cost_factor: float = 10.0  # …or factor × a refresh's own wall time, when longer
    listing: str = "lean"  # lean: poll through SQUEUE_FORMAT | json: every look `squeue --json`
    tail_bytes: int = 16 * 1024
    pyslurm: str = "auto"  # auto: read jobs through pyslurm where it matches the cluster | off
    backfill_partition: str = "llm"  # SPEC B1: the preemptible partition (PriorityTier below)
    backfill_cpus: int = 1  # per LLM instance: small, so it never blocks a research job's CPUs
    backfill_mem_gb: int = 1
    # a start burst (every GPU after a drain): this many `sbatch` in flight at once; one attempt
    # is still submitted at most once (a lock per Slurm job name, and the record before sbatch)
    submit_concurrency: int = 8
