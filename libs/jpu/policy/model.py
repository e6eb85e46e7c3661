"""Plain data the policy core decides on: a snapshot in, decisions out. No I/O, no clock.

The same types are used by the dispatcher service (built from projections) and by the
simulator (built from its virtual cluster), so both run exactly the same policy code.

The immutable records are `gc=False` (msgspec): they hold only atoms, tuples and frozensets, so
they can never be part of a reference cycle, and a 100k-job queue then costs the garbage
collector nothing on every cycle.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Literal, Protocol

import msgspec

from jpu.config import DEFAULT_DEMOTION_MARGIN, DemotionMode, ReservationBackfill, Tier

GpuState = str  # "free" | "job:<id>" | "reserved:<id>" | "backfill:<id>" | "down"  (SPEC §1.2)
# D7; MinVram: only GPUs below the job's VRAM floor (min_vram_gb, raised by an OOM retry, X8)
# have enough idle for it; Dependency and Held only in the personal queue (Q8, Q9)
PendingReason = Literal[
    "Priority",
    "Resources",
    "MinVram",
    "Reservation",
    "Maintenance",
    "ConcurrencyLimit",
    "Dependency",
    "Held",
]
MaintenanceState = Literal["NORMAL", "DRAINING", "BACKFILL_RECOVERY", "ACTIVE"]
ReleaseReason = Literal["dispatched", "swap", "demoted", "cancelled", "maintenance", "capacity"]
# R5 lost GPUs; R6 `yield` gave them to a higher job; R7 lent them to a lower job with a limit
ShrinkReason = Literal["lost", "yielded", "lent"]


class Gpu(msgspec.Struct, frozen=True, gc=False):
    """One physical GPU: a row of `gpu_resources`."""

    node: str
    tier: str
    index: int
    state: GpuState = "free"
    # A reserved GPU may keep running LLM backfill until its job dispatches (SPEC R2): the
    # backfill id is then carried here, since `state` says `reserved:<id>`.
    backfill: str | None = None


class Reservation(msgspec.Struct, frozen=True, gc=False):
    """GPUs a queued job holds in one placement (node × tier) while more gather (SPEC R2)."""

    node: str
    tier: str
    gpus: tuple[int, ...]
    since: float  # when the reservation started; held time is charged from here
    # When each GPU of `gpus` joined (same order; R2 grows add GPUs later). Empty = all at `since`.
    joined: tuple[float, ...] = ()

    def joined_at(self) -> dict[int, float]:
        """GPU index → when it joined the reservation (all at `since` without `joined`)."""
        return dict(zip(self.gpus, self.joined or (self.since,) * len(self.gpus), strict=True))


class QueuedJob(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A job in the global queue (GLOBAL_QUEUE_WAIT or RESERVING)."""

    job_id: str
    lab: str
    user: str
    num_gpus: int
    queue_entered_at: float
    tiers: frozenset[str] | None = None
    min_vram_gb: int | None = None
    attempt: int = 1
    time_limit_s: float | None = None
    reservation: Reservation | None = None


class RunningJob(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A DISPATCHED/RUNNING job (needed by baselines that plan on time limits)."""

    job_id: str
    lab: str
    node: str
    tier: str
    gpus: tuple[int, ...]
    started_at: float
    time_limit_s: float | None = None


class LabUsage(msgspec.Struct, frozen=True, gc=False):
    """Stored usage `(value, as_of)`; the decayed value is computed at a time (SPEC F3)."""

    value: float = 0.0
    as_of: float = 0.0


class JobQueue(Protocol):
    """The global queue as a snapshot carries it: its jobs, read as often as needed. A list in
    any order, or kept grouped by lab by the caller (`jpu.policy.labqueues.LabQueues`: the cycle
    then merges labs instead of sorting jobs, D1)."""

    def __iter__(self) -> Iterator[QueuedJob]: ...
    def __len__(self) -> int: ...


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    tiers: dict[str, Tier]
    gpus: list[Gpu]
    queue: JobQueue  # not to be changed during a cycle
    usage: dict[str, LabUsage]
    half_life_s: float = 7 * 24 * 3600.0
    maintenance: MaintenanceState = "NORMAL"
    running: list[RunningJob] = []
    # SPEC R6: how R3 demotes (jpu.policy.demotion); "strict" is R3 exactly as written
    reservation_demotion: DemotionMode = "strict"
    reservation_demotion_margin: float = DEFAULT_DEMOTION_MARGIN
    # SPEC R7: "limit" lets a lower job whose time limit ends by the shadow time start on the
    # GPUs rank 1 reserves (jpu.policy.lend); "off" is the seed's rule
    reservation_backfill: ReservationBackfill = "off"


# --- decisions ------------------------------------------------------------------------------


class ReservationRelease(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    job_id: str
    lab: str
    node: str
    tier: str
    gpus: tuple[int, ...]
    reason: ReleaseReason
    gpu_seconds: float  # GPU-seconds held by the reservation up to `now`
    charge_now: float  # TFLOP-s to charge at once (R3, maintenance, capacity); 0 for swap/dispatch
    # gpu_seconds × the reservation tier's tflops, whether charged now or with the attempt (F4):
    # after a swap to another tier the deferred part must still be charged at *this* tier's rate.
    held_cost: float = 0.0


class ReservationStart(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    job_id: str
    node: str
    tier: str
    gpus: tuple[int, ...]


class ReservationGrow(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    job_id: str
    node: str
    tier: str
    gpus: tuple[int, ...]  # all held after growing
    added: tuple[int, ...]


class ReservationShrink(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Reserved GPUs leave, the rest stays: R5 `lost` while the placement can still fit the job,
    R6 `yielded` to a higher job (`reservation_demotion: yield`), or R7 `lent` to a lower job
    (`lent_to`) whose time limit ends by the shadow time (`until`). Their held time so far
    rides with the attempt (charged at its end, like R4); a lent GPU's time from now on is the
    borrower's (F5)."""

    job_id: str
    node: str
    tier: str
    gpus: tuple[int, ...]  # all still held
    removed: tuple[int, ...]
    gpu_seconds: float  # held by the removed GPUs up to now
    tflops: float
    reason: ShrinkReason = "lost"
    lent_to: str | None = None  # R7: the job that starts on the removed GPUs
    until: float | None = None  # R7: the reservation's shadow time when lent


class Dispatch(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    job_id: str
    lab: str
    node: str
    tier: str
    gpus: tuple[int, ...]
    attempt: int = 1
    preempt_backfill: tuple[str, ...] = ()  # backfill ids to preempt first (SPEC B2)


class CycleResult(msgspec.Struct, kw_only=True):
    """Everything one dispatch cycle decided, in the order it must be applied."""

    order: list[str]  # job ids by rank (rank 1 first) — D1
    releases: list[ReservationRelease] = []
    starts: list[ReservationStart] = []
    grows: list[ReservationGrow] = []
    shrinks: list[ReservationShrink] = []
    dispatches: list[Dispatch] = []
    # job id -> D7 reason for every job not dispatched; the cycle gives a lazy `Pending`
    # (jpu.policy.pending) — a read-only Mapping; copy with `dict(pending.items())`.
    pending: Mapping[str, PendingReason] = {}
