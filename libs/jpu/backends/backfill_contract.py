"""The backfill extension of the execution backend (SPEC B1–B3): LLM instances on idle GPUs.

A separate, optional protocol so a backend can run research jobs without supporting backfill:
the backfill service idles (with a warning) on a backend that is not a `BackfillBackend`, and the
slurm-agent skips its own preemption step (a Slurm cluster preempts by partition priority).

Contract, beyond the signatures:
  * `submit_backfill` is idempotent per `backfill_id`: a second submit returns the first handle
    and starts nothing (two backfill replicas deciding the same start run one instance).
  * `preempt_backfill` is what the slurm-agent calls before launching a research attempt (B2):
    every backfill instance of this backend on those GPUs gets SIGTERM at once, SIGKILL after
    `grace_s`, and the call returns when they are gone (or the kill is given up), so the research
    job never shares its GPUs. It works from any process (the instances belong to the backfill
    service): it acts on what the backend can see of the cluster, not on in-memory handles.
  * backfill instances are never reported by `ExecutionBackend.running` (they are not attempts:
    the agent must not cancel them as orphans).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec

from jpu.backends.base import BackendStatus


class BackfillSpec(msgspec.Struct, frozen=True, kw_only=True):
    backfill_id: str  # deterministic (the backfill service derives it from the log)
    node: str
    tier: str
    gpu: int  # one instance per idle GPU (B1)
    command: str  # configuration `backfill_command`; written to a script, never interpolated
    env: dict[str, str] = msgspec.field(default_factory=dict)
    partition: str | None = None  # the preemptible partition (Slurm); local ignores it


class BackfillHandle(msgspec.Struct, frozen=True, kw_only=True):
    backend_job_id: str
    endpoint: str | None = None  # where the instance serves (OpenAI-compatible `/v1`)


@runtime_checkable
class BackfillBackend(Protocol):
    async def submit_backfill(self, spec: BackfillSpec) -> BackfillHandle: ...

    async def poll_backfill(self, backend_job_id: str) -> BackendStatus:
        """The instance's status; UnknownBackendJob when the backend never knew it."""
        ...

    async def cancel_backfill(self, backend_job_id: str, grace_s: float) -> None:
        """SIGTERM now, SIGKILL after `grace_s`; returns at once (the end is seen by polling)."""
        ...

    async def running_backfill(self) -> list[str]:
        """Backend ids of backfill instances not yet ended (re-adoption, orphan sweep)."""
        ...

    async def preempt_backfill(
        self, node: str, tier: str, gpus: list[int], grace_s: float
    ) -> list[str]:
        """B2: end every backfill instance on these GPUs now; returns their backend ids."""
        ...
