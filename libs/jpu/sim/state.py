"""The simulator's own bookkeeping: the kinds of timed happenings and the run's totals.

A job's lifecycle is not here: it is the services' fold (jpu.domain.cluster.ClusterState) of
the events the simulator appends; the simulator keeps only what the simulated cluster and the
summary need.
"""

from __future__ import annotations

from dataclasses import dataclass

REJECTED = "REJECTED"  # SPEC Q2: never queued, no events (a summary state only)

# kinds of timed happenings, also their order within one instant: a cycle sees all of its time
END, CANCEL, RELEASE, ARRIVAL, BACKFILL, CYCLE = range(6)


@dataclass(slots=True)
class Totals:
    """GPU-seconds by kind, for utilization (SPEC §10), and counts for the summary."""

    run_gpu_s: float = 0.0
    reserved_gpu_s: float = 0.0
    backfill_gpu_s: float = 0.0
    cycles: int = 0
    cycles_skipped: int = 0
    demotions: int = 0
    backfills_started: int = 0
    backfills_preempted: int = 0
    oom_retries: int = 0
    max_global_queue: int = 0  # longest global queue a cycle saw


@dataclass(slots=True)
class Outcome:
    """What the summary reports of one job beyond its folded state: when it first got GPUs,
    the tier of its last attempt, what it was charged, and its final fold (JobView) once it
    left the hot state (SPEC O6)."""

    first_dispatch_at: float | None = None
    tier: str | None = None
    charged: float = 0.0
    ended_at: float | None = None
    final_state: str | None = None
    final_attempt: int = 1
    reason: str | None = None
