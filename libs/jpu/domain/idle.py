"""What the backfill service reads off the log beyond the ClusterState (SPEC B1, B3, E2).

* since when each GPU is `free` (and at which stream seq it became free): the settle time of
  B1/B3 and the deterministic backfill id both come from the log, so every replica and every
  restart sees the same values;
* the BackfillStarted of every instance the log says is running (its backend job id);
* the last stream seq of each node's backfill subject (optimistic concurrency, E2).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from jpu.domain.cluster import ClusterState
from jpu.domain.holdings import gpus
from jpu.domain.states import GpuKey
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    Delivered,
    JobDispatched,
    JobEnded,
    JobRetryScheduled,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
)

# Events after which a GPU may have changed state (free ⇄ held).
GPU_EVENTS = (
    JobDispatched,
    JobEnded,
    ReservationStarted,
    ReservationGrown,
    ReservationShrunk,
    ReservationReleased,
    BackfillStarted,
    BackfillEnded,
    NodeInventoryObserved,
)
# Events after which the backfill service may decide something new.
WAKE_EVENTS = (*GPU_EVENTS, MaintenanceChanged, JobRetryScheduled)


@dataclass(frozen=True)
class Idle:
    since: float  # ts of the event that freed the GPU
    seq: int  # its stream seq: one free period of one GPU ⇒ one backfill id


def backfill_id(key: GpuKey, free_seq: int) -> str:
    """Deterministic: two replicas (or a restart) deciding on the same log pick the same id."""
    node, tier, gpu = key
    digest = hashlib.sha256(f"{node}|{tier}|{gpu}|{free_seq}".encode()).hexdigest()
    return f"bf-{digest[:16]}"


@dataclass
class Tracker:
    state: ClusterState
    idle: dict[GpuKey, Idle] = field(default_factory=dict)
    instances: dict[str, BackfillStarted] = field(default_factory=dict)  # backfill id → start
    subject_seq: dict[str, int] = field(default_factory=dict)  # node → last backfill seq

    def on_event(self, d: Delivered) -> None:
        """Called by the Follower after `evolve` applied the event."""
        e = d.event
        if isinstance(e, BackfillStarted):
            self.subject_seq[e.node] = d.seq
            self.instances[e.backfill_id] = e
        elif isinstance(e, BackfillEnded):
            self.subject_seq[e.node] = d.seq
            self.instances.pop(e.backfill_id, None)
        if isinstance(e, GPU_EVENTS):
            self.refresh(e.ts, d.seq)

    def refresh(self, ts: float, seq: int) -> None:
        """A GPU that turned `free` is idle since `ts`; one that is no longer free is not idle."""
        free = {(g.node, g.tier, g.index) for g in gpus(self.state) if g.state == "free"}
        for key in [k for k in self.idle if k not in free]:
            del self.idle[key]
        for key in free:
            self.idle.setdefault(key, Idle(ts, seq))

    def backend_ids(self) -> set[str]:
        return {s.backend_job_id for s in self.instances.values() if s.backend_job_id}
