"""The simulated cluster: what the hardware and the backfill service would know of each GPU.

Who holds a GPU is the services' fold (`ClusterState.holders`, `.backfill`, `.down`). The
simulated cluster adds what the backfill service reads off the log beside the fold: since when
(and since which log seq) each GPU has been idle, as `jpu.domain.idle.Idle` (the B1 settle clock
and the seq its deterministic backfill id is made of), kept event by event rather than by a scan
of every GPU per event (`jpu.domain.idle.Tracker`); and since when each backfill instance has run
(for utilization). It also keeps the cycle's GPU rows and running jobs up to date event by event,
each row and job by the very functions `jpu.domain.dispatch.snapshot` builds them with (`gpu_row`,
`running_job`), so a cycle costs what the policy costs, not a rebuild of 512 rows.
"""

from __future__ import annotations

from jpu.domain.cluster import ClusterState, GpuKey
from jpu.domain.holdings import gpu_row, running_job
from jpu.domain.idle import Idle
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    Event,
    JobDispatched,
    JobEnded,
    JobEvent,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
)
from jpu.policy.model import Gpu, RunningJob

# the job events that can change what a job holds (JobView.gpu_holdings) or whether it runs
# (running_job): the others (submitted, promoted, started, cancel requested, retry) cannot.
# By exact type (event classes are never subclassed): this runs for every event.
_RUNS = frozenset({JobDispatched, JobEnded})
_HOLDS = _RUNS | {ReservationStarted, ReservationGrown, ReservationShrunk, ReservationReleased}
_BACKFILL = frozenset({BackfillStarted, BackfillEnded})


class SimCluster:
    def __init__(self, state: ClusterState, now: float = 0.0, *, idle_clocks: bool = True) -> None:
        self.state = state
        # keep `idle_since` (only backfill reads it: a run without backfill skips its upkeep)
        self.idle_clocks = idle_clocks
        self.keys: list[GpuKey] = [
            (node, tier, i)
            for (node, tier), count in sorted(state.inventory.items())
            for i in range(count)
        ]
        self.capacity = len(self.keys)
        self.pos = {k: p for p, k in enumerate(self.keys)}
        self.rows: list[Gpu] = [gpu_row(state, k) for k in self.keys]  # = jpu.domain.holdings.gpus
        self.reserved = sum(1 for g in self.rows if g.state.startswith("reserved:"))
        self.running: dict[str, RunningJob] = {  # = jpu.domain.holdings.running, by dispatch
            j.job_id: r for j in state.jobs.values() if (r := running_job(j)) is not None
        }
        self.idle_since: dict[GpuKey, Idle] = {
            k: Idle(now, state.seq)
            for k in self.keys
            if idle_clocks and k not in state.holders and k not in state.down
        }
        self.backfill_since: dict[GpuKey, float] = {}  # GPU -> when its backfill instance began
        # GPU -> when a job or reservation last let go of it (a forward estimate's start times)
        self.freed_at: dict[GpuKey, float] = {}

    def idle_count(self) -> int:
        """GPUs free or backfilled (SPEC P2), not held by a job or reservation, not down."""
        return self.capacity - len(self.state.holders) - len(self.state.down)

    def reserving(self) -> bool:
        """Some reservation holds a GPU (one a cycle may grow, dispatch or demote)."""
        return self.reserved > 0

    def row(self, key: GpuKey) -> Gpu:
        return gpu_row(self.state, key)

    # --- the cycle's rows, event by event --------------------------------------------------

    def folded(self, event: Event, now: float, seq: int) -> list[GpuKey]:
        """The fold applied `event` (log seq `seq`): refresh the rows it may have changed, its
        job, and the idle clocks. Returns the GPUs its job let go of (idle again, to backfill if
        one kept running, SPEC R2)."""
        state = self.state
        freed: list[GpuKey] = []
        kind = type(event)
        if kind in _HOLDS:
            assert isinstance(event, JobEvent)
            # what the fold's job held before and after the event (none: a job never seen)
            before, after = state.just_held or ({}, {})
            holders = state.holders
            freed = [k for k in before if k not in after and k not in holders]
            if self.idle_clocks:
                idle = self.idle_since
                for k in after:
                    idle.pop(k, None)  # went to a job or reservation
                for k in freed:
                    idle[k] = Idle(now, seq)
            freed_at = self.freed_at
            for k in freed:
                freed_at[k] = now
            changed = before.keys() | after.keys()
            if kind in _RUNS:
                job = state.job_seen(event.job_id)
                r = running_job(job) if job is not None else None
                if r is not None:
                    self.running[event.job_id] = r
                else:
                    self.running.pop(event.job_id, None)
        elif kind in _BACKFILL:
            assert isinstance(event, BackfillStarted | BackfillEnded)
            changed = {(event.node, event.tier, event.gpu)}
        elif isinstance(event, NodeInventoryObserved):
            changed = set(self.keys)  # the sim's inventory is fixed: same GPUs, new states
        else:
            return freed
        rows = self.rows
        for k in changed:
            p = self.pos.get(k)
            if p is not None:
                old, rows[p] = rows[p], gpu_row(state, k)
                was = old.state.startswith("reserved:")
                self.reserved += rows[p].state.startswith("reserved:") - was
        return freed
