"""The execution backend contract (SPEC X9): what the slurm-agent needs from whatever runs jobs.

Both the local backend (processes on a fake GPU inventory) and the Slurm backend pass the same
contract tests (tests/integration/test_backend_contract.py). The agent never looks past this
interface, so a dispatch is executed the same way on a laptop and on a cluster.

Contract, beyond the signatures:
  * `submit` is idempotent per (job_id, attempt): submitting a spec whose attempt the backend
    already knows returns the existing backend job id and starts nothing (an agent that crashed
    between submit and JobStarted must not run the attempt twice).
  * `cancel` sends SIGTERM at once and SIGKILL `grace_s` later (SPEC X5); it returns at once, the
    final state is seen through `poll`. A job still alive `kill_failed_after_s` after the kill ends
    `CANCELLED` with `kill_failed=True` and its node is drained.
  * a time limit ends the job `TIMEOUT` (SIGTERM, the grace, then SIGKILL).
  * `find(job_id, attempt)` answers which backend job runs an attempt, before any event says so.
  * `poll` of an id the backend never knew (or forgot) raises UnknownBackendJob.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final, Protocol, runtime_checkable

import msgspec

# What a backend reports is a plain value the pure domain decides from; the contract re-exports it.
from jpu.domain.observed import TERMINAL_STATES as TERMINAL_STATES
from jpu.domain.observed import BackendState as BackendState
from jpu.domain.observed import BackendStatus as BackendStatus
from jpu.domain.observed import NodeInventory as NodeInventory

# job, attempt and backfill ids as a backend may put them in a file name, a Slurm job name or an
# argv: every backend checks them against this one pattern before it uses them
SAFE_ID: Final = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")


class BackendError(RuntimeError):
    """The backend cannot do what was asked (bad spec, unusable node, spawn failure)."""


class UnknownBackendJob(KeyError):
    """`poll`/`cancel` of a backend job id the backend does not know."""


class LaunchSpec(msgspec.Struct, frozen=True, kw_only=True):
    """One attempt of one job, as the dispatcher placed it (SPEC X1, X2)."""

    job_id: str
    attempt: int
    user: str
    node: str
    tier: str
    gpus: list[int]  # GPU indices of the placement assigned to the job
    num_gpus: int
    command: str  # shell script text: written to a file, never interpolated (X3)
    env: dict[str, str] = msgspec.field(default_factory=dict)
    time_limit_s: float | None = None
    cpus: int = 1  # num_gpus × tier.cpus_per_gpu (X1)
    mem_gb: int = 1  # num_gpus × tier.mem_gb_per_gpu (X1)
    output_dir: str = ""  # JOB_OUTPUT_DIR: per job and attempt (X2)
    chdir: str | None = None  # U5: the absolute directory it runs in; None: output_dir
    partition: str | None = None  # the tier's Slurm partition (X1); the local backend ignores it
    workspace: str | None = None  # X4a: the user's READY workspace it runs in; None: the base
    # X4a: the image of that workspace as resolved at submit (JobSubmitted.workspace_image);
    # None with a `workspace`: the backend resolves the name itself (its own builds, tests)
    workspace_image: str | None = None
    # U6/U7: what sbatch's -J/-o/-e/--open-mode/--signal and an array task mean at execution
    name: str = "job"
    output: str | None = None
    error: str | None = None
    open_mode: str | None = None
    signal: str | None = None
    array_job_id: str | None = None
    array_task_id: int | None = None

    @property
    def workdir(self) -> str:
        """Where the job starts (U5, like sbatch's submit directory): its `chdir`, else
        JOB_OUTPUT_DIR. The job sees it as JPU_WORKDIR; the backend enters it as the user."""
        return self.chdir or self.output_dir


@runtime_checkable
class NotifiesEnds(Protocol):
    """A backend that sees its attempts end (the local backend awaits its own children) and says
    so at once: the agent polls that attempt now, not at its backoff (SPEC X6)."""

    def notify_ends(self, callback: Callable[[str], None]) -> None:
        """`callback(backend_job_id)` once an attempt's final status is saved."""
        ...


@runtime_checkable
class ExecutionBackend(Protocol):
    name: str

    async def submit(self, spec: LaunchSpec) -> str:
        """Start (or queue) the attempt; returns the backend job id. Idempotent per attempt."""
        ...

    async def find(self, job_id: str, attempt: int) -> str | None:
        """The backend job of this attempt if one was ever submitted (closes the window between
        a submit and the JobStarted that records it: a cancel then reaches the real job)."""
        ...

    async def poll(self, backend_job_id: str) -> BackendStatus: ...

    async def cancel(self, backend_job_id: str, grace_s: float) -> None:
        """SIGTERM now, SIGKILL after `grace_s` (X5); returns without waiting for the end."""
        ...

    async def inventory(self) -> list[NodeInventory]: ...

    async def running(self) -> list[str]:
        """Backend job ids not yet terminal (for re-adoption after an agent restart)."""
        ...

    async def close(self) -> None:
        """Stop watching; running jobs keep running (they belong to the cluster, not to us)."""
        ...
