"""Why a job waited (SPEC U4, D1, D7, R3). Pure: events in, a timeline out.

The log is folded with the services' own fold (`jpu.domain.cluster.evolve`); at every event that
can change the queue while the job waits, the dispatcher's own cycle (`jpu.policy.cycle` on
`jpu.domain.dispatch.snapshot`, at the event's time) gives the job's rank and pending reason and
who is ahead. Ranks only move on events: decay multiplies every lab's usage by the same factor
(F3), so time alone never reorders labs — the event at which the job's rank changed is what
changed it. A reservation lost by R3 is blamed on the event after which the job stopped being
rank 1 (e.g. another job's end whose charge lifted the job's own lab above another, SPEC R3's
worked example), together with the job that then ranked first.

Far back in a long queue the standing is sampled, not taken at every event: a cycle costs
O(queue), and a wait of weeks on a busy cluster has tens of thousands of queue events (bench/
bench_explain.py: one job's wait of 463 h on 512 GPUs had 44,449 of them, 185 s of CPU). It is
exact where it decides what a lab member asks about — the job's own events, while it holds a
reservation or is within `NEAR` ranks of the head (R3's blame), maintenance changes — and
elsewhere taken at most once per 1/`SAMPLES` of the time it has waited so far, so the cycles
grow with the logarithm of the wait. A sampled step says so (`sampled`) and names no cause:
several events moved the job since the step before.

Same log, same answer: nothing here reads a clock; "now" is the last event's time, or the
caller's `now` for the phase still running.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, Literal

import msgspec

from jpu.config import Cluster
from jpu.domain.cluster import ClusterState, evolve, parent_facts
from jpu.domain.dispatch import DEFAULT_HALF_LIFE_S, snapshot
from jpu.domain.promotion import personal_standing
from jpu.domain.states import QUEUED, JobView
from jpu.events import (
    BackfillEnded,
    Delivered,
    Event,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobEvent,
    JobHeld,
    JobPromoted,
    JobReleased,
    JobRetryDeclined,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
    UsageCharged,
)
from jpu.policy.charging import charge_id
from jpu.policy.cycle import cycle
from jpu.policy.fairshare import ZERO_USAGE, decayed
from jpu.policy.model import LabUsage

# Events after which a cycle may rank or decide differently (the dispatcher's D8 triggers and
# the reservation/dispatch events that change who holds which GPUs).
QUEUE_EVENTS: Final = (
    JobPromoted,
    JobRetryScheduled,
    JobEnded,
    UsageCharged,
    ReservationStarted,
    ReservationGrown,
    ReservationShrunk,
    ReservationReleased,
    JobDispatched,
    MaintenanceChanged,
    NodeInventoryObserved,
    BackfillEnded,
    JobCancelRequested,
    JobHeld,  # Q9: Held, then ConcurrencyLimit or Dependency (D7)
    JobReleased,
)
NEAR: Final = 3  # ranks from the head within which every queue event is a step
SAMPLES: Final = 64  # far back: at most one step per 1/SAMPLES of the wait so far
# A job's states as the phases a lab member knows (S1; DISPATCHED → RUNNING is the backend
# starting it; FAILED with an OOM retry pending is the X8 decision).
PHASES: Final = {
    "PERSONAL_QUEUE_WAIT": "personal_queue",
    "GLOBAL_QUEUE_WAIT": "global_queue",
    "RESERVING": "reserving",
    "DISPATCHED": "starting",
    "RUNNING": "running",
    "CANCELLING": "cancelling",
}


# What a step's "because" says, in words a lab member acts on or understands (never an event's
# type): the renderers (jpu.cli.why, the console's why.js) have one sentence per kind, and
# tests/unit/sim/test_explain_causes.py renders every kind in both.
CauseKind = Literal[
    # the job's own events
    "submitted",  # Q4: every job enters its user's personal queue
    "promoted_free_slot",  # Q5: the user had a free slot (`count`: their other slot jobs)
    "promoted_slot_freed",  # Q5: a slot freed when `jobs` ended
    "retried",  # X8: out of GPU memory on `tier` (`vram_gb`); retried with `min_vram_gb`
    "retry_declined",  # X8: no retry (`reason`: max_attempts | no_fit; `min_vram_gb` needed)
    "reserved",  # R1: rank 1, `count` of the `needed` GPUs idle on `node`: it holds them
    "reservation_grown",  # R2: `count` of `needed` held now; the GPU freed by `jobs`
    "reservation_shrunk",  # R5 lost / R6 yielded / R7 lent (to `jobs`) GPUs; `count` still held
    "released_demoted",  # R3: `jobs[0]` of `other_lab` ranked first
    "released_maintenance",  # M1
    "released_capacity",  # R5, T2
    "released_cancelled",
    "released_to_run",  # D3.a: all its GPUs free: it starts on its reservation
    "released_swap",  # R4: it starts elsewhere, sooner
    "dispatched",  # `gpus` on `node` (`tier`) were free, freed by `jobs` (if since it queued)
    "dispatched_reserved",  # the last GPU of its reservation freed (by `jobs`)
    "dispatched_lent",  # R7: on GPUs `jobs`' reservation lent it (its limit ends before)
    "started",  # the backend started it on `node`
    "completed",
    "exited",  # non-zero exit `code`
    "out_of_memory",  # X7 on `tier`
    "timed_out",
    "failed",  # another end `reason`
    "cancelled",
    "cancel_requested",  # `by` asked
    "held",  # Q9: `by` held it in the personal queue
    "released",  # Q9: `by` released it
    "dependency_never_satisfied",  # Q8: a parent (`jobs`, ended `state`; None: unknown here)
    # ended so that its condition cannot be met
    # other jobs, labs, the cluster
    "other_entered",  # `job_id` of `lab` entered the global queue (behind it)
    "other_entered_ahead",  # ... and ranks ahead of it (D1: its lab's usage is lower)
    "other_retried",  # X8: another job back in the queue for a bigger GPU
    "other_ended",  # freeing `gpus` on `node`
    "other_left",  # ended before it ran (cancelled in the queue)
    "other_dispatched",  # to `node`
    "other_reserved",  # on `node`
    "other_reservation_changed",  # grew or shrank on `node`
    "other_released",  # its reservation on `node` (`reason`)
    "other_cancelled",  # `by` cancelled it
    "charged",  # `lab` charged for `job_id` (F4)
    "initial_usage",  # `lab`'s starting usage recorded
    "maintenance_draining",  # the admin `by` started maintenance, `message` (M1)
    "maintenance_recovery",  # M2: user jobs gone, LLM backfill being reclaimed
    "maintenance_active",  # M3
    "maintenance_ended",  # the admin `by` ended it
    "node_changed",  # `node` reported its GPUs: `state`, `count` down
    "backfill_ended",  # LLM backfill on `node` GPU `gpus` stopped (`reason`)
]
CAUSE_KINDS: Final[tuple[str, ...]] = CauseKind.__args__  # type: ignore[attr-defined]


class Cause(msgspec.Struct, frozen=True, kw_only=True):
    """What changed the job's standing: `kind` says it in words (CauseKind); `event` is the
    log's event type, for machines only."""

    seq: int
    at: float
    event: str  # the event type (never shown to people)
    kind: CauseKind
    job_id: str | None = None  # the job it is about (another job's end, promotion...)
    lab: str | None = None  # that job's lab, or the lab charged
    charge: float | None = None  # TFLOP-s the event charges (or owes) that lab (F4, R3)
    lab_usage: float | None = None  # that lab's decayed usage right after it (D1)
    jobs: list[str] = []  # other jobs the sentence names (freed a slot or GPUs, ranked first)
    other_lab: str | None = None  # the lab of jobs[0], when the sentence names it
    user: str | None = None
    node: str | None = None
    tier: str | None = None
    gpus: list[int] = []
    count: int | None = None  # GPUs held or idle, slots in use, GPUs down (see CauseKind)
    needed: int | None = None  # GPUs the job needs
    vram_gb: int | None = None
    min_vram_gb: int | None = None
    code: int | None = None  # exit code
    reason: str | None = None  # release, shrink, end or backfill reason
    state: str | None = None  # maintenance or node state
    by: str | None = None  # who: the admin, whoever cancelled
    message: str | None = None  # the admin's maintenance message
    waited_s: float | None = None  # time in the personal queue before promotion


class LabAhead(msgspec.Struct, frozen=True):
    lab: str
    usage: float  # decayed at the step's time, with every owed charge (D1)
    jobs: int  # its jobs ranked above this one


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """The job's standing after one event (only events that changed it are kept)."""

    seq: int
    at: float
    state: str
    rank: int | None  # 1-based; None outside the global queue
    pending_reason: str | None
    queue_length: int
    lab_usage: float  # the job's own lab, decayed at `at`
    ahead: list[LabAhead]  # labs with jobs ranked above it, in rank order of their first job
    first: str | None = None  # the rank-1 job when it is not this one
    first_lab: str | None = None
    cause: Cause | None = None
    sampled: bool = False  # far back: events since the previous step were not each looked at
    slot_holders: list[str] = []  # personal queue: the user's jobs holding slots then (S1)
    min_vram_gb: int | None = None  # MinVram (D7): the VRAM floor it waits for


class ReservationSpan(msgspec.Struct, kw_only=True):
    """One reservation the job held (R2), and how it ended (R3, R4, R5)."""

    node: str
    tier: str
    gpus: list[int]  # the most it held at once
    started_at: float
    start_seq: int
    ended_at: float | None = None
    end_seq: int | None = None
    reason: str | None = None  # ReservationReleased.reason; None while held
    gpu_seconds: float = 0.0
    tflops: float = 0.0
    charged_now: bool = False  # R3/M1/R5: charged at release; else with the attempt (R4, F4)
    cost: float = 0.0  # gpu_seconds × tflops (F1)
    lent_to: list[str] = []  # R7: jobs that started on its GPUs (they came back when those ended)
    # R3: the event after which the job was no longer rank 1, and who was rank 1 then
    demoted_by: Cause | None = None
    overtaken_by: str | None = None
    overtaken_by_lab: str | None = None
    overtaken_by_usage: float | None = None


class WaitTimeline(msgspec.Struct, kw_only=True):
    job_id: str
    lab: str
    user: str
    name: str
    num_gpus: int
    state: str
    attempt: int
    submitted_at: float
    as_of: float  # the time the answer is computed at (last event, or the caller's `now`)
    seq: int  # the last stream sequence folded
    steps: list[Step]
    reservations: list[ReservationSpan]
    phases: dict[str, float]  # phase -> seconds spent in it (PHASES), all attempts
    terminal: bool
    final: bool = False  # ended for good (S2; not an OOM attempt awaiting its X8 decision)


class JobNotInLog(LookupError):
    """The job's submission is not in the events given."""


_END_KINDS: Final[dict[str, CauseKind]] = {
    "OOM": "out_of_memory",
    "TIMEOUT": "timed_out",
    "NonZeroExitCode": "exited",
}
_RELEASE_KINDS: Final[dict[str, CauseKind]] = {
    "demoted": "released_demoted",
    "maintenance": "released_maintenance",
    "capacity": "released_capacity",
    "cancelled": "released_cancelled",
    "dispatched": "released_to_run",
    "swap": "released_swap",
}
_MAINTENANCE_KINDS: Final[dict[str, CauseKind]] = {
    "DRAINING": "maintenance_draining",
    "BACKFILL_RECOVERY": "maintenance_recovery",
    "ACTIVE": "maintenance_active",
    "NORMAL": "maintenance_ended",
}


class Seen:
    """What the fold noticed while the job waited, for the causes: who freed which GPU, and
    which of the user's jobs freed a slot while it was in the personal queue."""

    def __init__(self) -> None:
        self.freed: dict[tuple[str, int], tuple[str, float]] = {}  # GPU -> (job, when)
        self.slot_freed: list[str] = []  # since it entered the personal queue
        self.waits_since = 0.0  # when its current wait for GPUs began
        self.reserved_on: str | None = None  # the node of the reservation it holds or ran on
        self.lent: dict[tuple[str, int], str] = {}  # R7: GPU lent to it -> the reserving job

    def freed_by(self, node: str, gpus: Iterable[int]) -> list[str]:
        """The jobs that freed these GPUs since its wait began, oldest first."""
        got = [self.freed.get((node, g)) for g in gpus]
        hits = sorted({x for x in got if x is not None and x[1] >= self.waits_since},
                      key=lambda x: x[1])  # fmt: skip
        return list(dict.fromkeys(j for j, _ in hits))


def _own(e: Event, job: JobView, state: ClusterState, cluster: Cluster, seen: Seen) -> Cause:
    """The job's own event, as what happened to it (not "it was dispatched")."""
    kind: CauseKind
    kw: dict[str, object] = {}
    if isinstance(e, JobSubmitted):
        kind = "submitted"
    elif isinstance(e, JobPromoted):
        waited = max(0.0, e.ts - job.submitted_at)
        if seen.slot_freed:  # Q5: promoted when one of the user's jobs freed its slot
            kind, kw = "promoted_slot_freed", {"jobs": seen.slot_freed[-3:], "waited_s": waited}
        else:  # it had a free slot: nothing it waited for
            kind, kw = "promoted_free_slot", {"waited_s": waited}
        kw.update(user=job.user, count=max(0, state.slots_of(job.user) - 1))  # the others
    elif isinstance(e, JobRetryScheduled):
        end = job.last_end
        tier = end.tier if end is not None else None
        vram = _vram(cluster, tier)
        kind = "retried"
        kw = {"tier": tier, "vram_gb": vram, "min_vram_gb": e.min_vram_gb}
    elif isinstance(e, JobRetryDeclined):
        kind, kw = "retry_declined", {"reason": e.reason, "min_vram_gb": e.needed_vram_gb}
    elif isinstance(e, ReservationStarted):
        kind = "reserved"
        kw = {"node": e.node, "tier": e.tier, "gpus": list(e.gpus), "count": len(e.gpus),
              "needed": job.num_gpus}  # fmt: skip
    elif isinstance(e, ReservationGrown):
        kind = "reservation_grown"
        kw = {"node": e.node, "tier": e.tier, "gpus": list(e.added), "count": len(e.gpus),
              "needed": job.num_gpus, "jobs": seen.freed_by(e.node, e.added)}  # fmt: skip
    elif isinstance(e, ReservationShrunk):
        kind = "reservation_shrunk"
        kw = {"node": e.node, "gpus": list(e.removed), "count": len(e.gpus), "reason": e.reason,
              "needed": job.num_gpus, "jobs": [e.lent_to] if e.lent_to else []}  # fmt: skip
    elif isinstance(e, ReservationReleased):
        kind = _RELEASE_KINDS.get(e.reason, "released_capacity")
        kw = {"node": e.node, "tier": e.tier, "gpus": list(e.gpus), "reason": e.reason}
    elif isinstance(e, JobDispatched):
        jobs = seen.freed_by(e.node, e.gpus)
        kind = "dispatched"
        if seen.reserved_on == e.node:  # on the GPUs it had gathered (R2)
            kind = "dispatched_reserved"
        lenders = [x for g in e.gpus if (x := seen.lent.get((e.node, g))) is not None]
        if lenders:  # R7: under another job's reservation, lent until its shadow time
            kind, jobs = "dispatched_lent", list(dict.fromkeys(lenders))
        kw = {"node": e.node, "tier": e.tier, "gpus": list(e.gpus), "jobs": jobs,
              "needed": job.num_gpus}  # fmt: skip
    elif isinstance(e, JobStarted):
        kind = "started"
        kw = {"node": job.placement[0] if job.placement else None}
    elif isinstance(e, JobEnded):
        if e.state == "COMPLETED":
            kind = "completed"
        elif e.reason == "DEPENDENCY_NEVER_SATISFIED":
            kind = "dependency_never_satisfied"
        elif e.state == "CANCELLED":
            kind = "cancelled"
        elif e.oom:
            kind = "out_of_memory"
        else:
            kind = _END_KINDS.get(e.reason or "", "exited" if e.reason is None else "failed")
        kw = {"node": e.node, "tier": e.tier, "vram_gb": _vram(cluster, e.tier),
              "code": e.exit_code, "reason": e.reason}  # fmt: skip
        if kind == "dependency_never_satisfied" and job.never:  # Q8: name the parent, its end
            parent = job.never.split(":", 1)[1]
            facts = parent_facts(state, parent)
            kw.update(jobs=[parent], state=facts[2] if facts is not None else None)
    elif isinstance(e, JobCancelRequested):
        kind, kw = "cancel_requested", {"by": e.by}
    elif isinstance(e, JobHeld):
        kind, kw = "held", {"by": e.by}
    elif isinstance(e, JobReleased):
        kind, kw = "released", {"by": e.by}
    else:
        kind = "other_entered"  # unreachable for the events above; kept total for new events
    return Cause(seq=0, at=e.ts, event=type(e).__name__, kind=kind, job_id=job.job_id,
                 lab=job.lab, **kw)  # type: ignore[arg-type]  # fmt: skip


def _vram(cluster: Cluster, tier: str | None) -> int | None:
    for t in cluster.tiers:
        if t.name == tier:
            return int(t.vram_gb)
    return None


def _other(state: ClusterState, e: Event) -> Cause:
    """Another job's event, a charge, maintenance, the inventory, backfill."""
    kind: CauseKind
    kw: dict[str, object] = {}
    job_id = e.job_id if isinstance(e, JobEvent) else None
    other = state.job_seen(job_id) if job_id is not None else None
    if isinstance(e, UsageCharged):
        kind = "initial_usage" if e.reason == "initial" or e.job_id is None else "charged"
        return Cause(seq=0, at=e.ts, event=type(e).__name__, kind=kind, job_id=e.job_id,
                     lab=e.lab, charge=e.amount)  # fmt: skip
    if isinstance(e, MaintenanceChanged):
        kind = _MAINTENANCE_KINDS.get(e.state, "maintenance_draining")
        kw = {"state": e.state, "by": e.by, "message": e.message or None}
    elif isinstance(e, NodeInventoryObserved):
        kind = "node_changed"
        kw = {"node": e.node, "state": e.state, "count": sum(len(d) for d in e.down.values())}
    elif isinstance(e, BackfillEnded):
        kind, kw = "backfill_ended", {"node": e.node, "gpus": [e.gpu], "reason": e.reason}
    elif isinstance(e, JobPromoted):
        kind = "other_entered"
    elif isinstance(e, JobRetryScheduled):
        kind, kw = "other_retried", {"min_vram_gb": e.min_vram_gb}
    elif isinstance(e, JobEnded) and e.node is not None and e.gpus:
        kind, kw = "other_ended", {"node": e.node, "tier": e.tier, "gpus": list(e.gpus)}
    elif isinstance(e, JobEnded):
        kind = "other_left"
    elif isinstance(e, JobDispatched):
        kind, kw = "other_dispatched", {"node": e.node, "tier": e.tier, "gpus": list(e.gpus)}
    elif isinstance(e, ReservationStarted):
        kind, kw = "other_reserved", {"node": e.node, "tier": e.tier, "gpus": list(e.gpus)}
    elif isinstance(e, ReservationGrown | ReservationShrunk):
        kind, kw = "other_reservation_changed", {"node": e.node, "gpus": list(e.gpus)}
    elif isinstance(e, ReservationReleased):
        kind = "other_released"
        kw = {"node": e.node, "gpus": list(e.gpus), "reason": e.reason}
    elif isinstance(e, JobCancelRequested):
        kind, kw = "other_cancelled", {"by": e.by}
    else:
        kind = "other_entered"
    return Cause(seq=0, at=e.ts, event=type(e).__name__, kind=kind, job_id=job_id,
                 lab=other.lab if other is not None else None, **kw)  # type: ignore[arg-type]  # fmt: skip


def is_own(e: Event, job: JobView) -> bool:
    """`e` is one of the job's events; a task's submit is its array's one event (Q7)."""
    if not isinstance(e, JobEvent):
        return False
    return e.job_id == job.job_id or (isinstance(e, JobSubmitted) and e.job_id == job.array_id)


def _cause(
    state: ClusterState,
    d: Delivered,
    now: float,
    hl: float,
    usage: Mapping[str, LabUsage],
    job: JobView,
    cluster: Cluster,
    seen: Seen,
) -> Cause:
    e: Event = d.event
    ours = is_own(e, job)
    cause = _own(e, job, state, cluster, seen) if ours else _other(state, e)
    lab, amount = cause.lab, cause.charge
    if isinstance(e, JobEvent):
        owed = state.owed.get(charge_id(e.event_id))  # what this event charges (F4, R3)
        if owed is not None:
            lab, amount = owed.lab, owed.amount
    after = None if lab is None else decayed(usage.get(lab, ZERO_USAGE), now, hl)
    return msgspec.structs.replace(cause, seq=d.seq, lab=lab, charge=amount, lab_usage=after)


def _step(
    state: ClusterState,
    cluster: Cluster,
    job: JobView,
    now: float,
    d: Delivered,
    hl: float,
    seen: Seen,
) -> Step:
    snap = snapshot(state, cluster, hl)
    usage = snap.usage
    cause = _cause(state, d, now, hl, usage, job, cluster, seen)
    if job.state not in QUEUED:
        holders: list[str] = []
        reason: str | None = None
        if job.state == "PERSONAL_QUEUE_WAIT":  # S1: the user's jobs that hold slots now
            # D7: Held (Q9), Dependency (Q8), ArrayThrottle (Q7: counting what intake
            # promotes at once), or a slot
            reason, promoting = personal_standing(state, cluster, job)
            if reason == "ConcurrencyLimit":  # until a promotion with no slot freed says not
                holders = _slot_holders(state, job)  # (none: a limit of 0, or intake not yet)
            elif reason == "ArrayThrottle":  # Q7: the array's tasks holding its %N slots
                holders = _array_holders(state, job, promoting)
        own = decayed(usage.get(job.lab, ZERO_USAGE), now, hl)
        return Step(
            seq=d.seq, at=now, state=job.state, rank=None, pending_reason=reason,
            queue_length=len(state.queue), lab_usage=own, ahead=[], cause=cause,
            slot_holders=holders,
        )  # fmt: skip
    result = cycle(snap, now)  # D1, D3, D7: the dispatcher's own decision at this moment
    order = result.order
    rank = order.index(job.job_id)
    ahead: dict[str, int] = {}
    other_ahead = False
    for jid in order[:rank]:
        other = state.jobs[jid]
        ahead[other.lab] = ahead.get(other.lab, 0) + 1
        other_ahead = other_ahead or jid == cause.job_id
    labs = [
        LabAhead(lab, decayed(usage.get(lab, ZERO_USAGE), now, hl), n) for lab, n in ahead.items()
    ]
    first = order[0] if rank > 0 else None
    first_lab = state.jobs[first].lab if first is not None else None
    if cause.kind == "other_entered" and other_ahead:  # D1: its lab's usage is lower
        cause = msgspec.structs.replace(cause, kind="other_entered_ahead")
    elif cause.kind == "released_demoted" and first is not None:  # R3: who ranked first
        cause = msgspec.structs.replace(cause, jobs=[first], other_lab=first_lab)
    dispatched = {x.job_id for x in result.dispatches}
    reason = None if job.job_id in dispatched else result.pending.get(job.job_id)
    return Step(
        seq=d.seq,
        at=now,
        state=job.state,
        rank=rank + 1,
        pending_reason=reason,
        queue_length=len(order),
        lab_usage=decayed(usage.get(job.lab, ZERO_USAGE), now, hl),
        ahead=labs,
        first=first,
        first_lab=first_lab,
        cause=cause,
        min_vram_gb=job.min_vram_gb if reason == "MinVram" else None,
    )


SLOT_HOLDERS_SHOWN: Final = 8  # a story names at most this many of the user's slot jobs


def _slot_holders(state: ClusterState, job: JobView) -> list[str]:
    """The user's jobs holding slots (S1), oldest first (at most SLOT_HOLDERS_SHOWN)."""
    if not state.slots_of(job.user):
        return []
    mine = [j for j in state.jobs.values() if j.user == job.user and j.holds_slot]
    mine.sort(key=lambda j: (j.submitted_at, j.job_id))
    return [j.job_id for j in mine[:SLOT_HOLDERS_SHOWN]]


def _sibling(job: JobView, e: Event) -> bool:
    """Another task of `job`'s array took or left a slot while `job` waits in the personal queue:
    its `%N` (Q7, ArrayThrottle) may have changed."""
    if job.array_id is None or job.state != "PERSONAL_QUEUE_WAIT":
        return False
    if not isinstance(e, JobPromoted | JobEnded | JobRetryDeclined):
        return False
    return e.job_id != job.job_id and e.job_id.startswith(f"{job.array_id}_")


def _array_holders(state: ClusterState, job: JobView, promoting: Iterable[str] = ()) -> list[str]:
    """The tasks of `job`'s array holding its `%N` slots (Q7), or taking one at once
    (`promoting`), lowest index first (at most SLOT_HOLDERS_SHOWN)."""
    about = set(promoting)
    mine = [
        j
        for j in state.jobs.values()
        if j.array_id is not None
        and j.array_id == job.array_id
        and (j.holds_slot or j.job_id in about)
    ]
    mine.sort(key=lambda j: j.array_task or 0)
    return [j.job_id for j in mine[:SLOT_HOLDERS_SHOWN]]


def _same(a: Step, b: Step) -> bool:
    """A step worth showing changes the state, rank, reason or who is ahead (not just usage)."""
    return (a.state, a.rank, a.pending_reason, [(x.lab, x.jobs) for x in a.ahead], a.first) == (
        b.state,
        b.rank,
        b.pending_reason,
        [(x.lab, x.jobs) for x in b.ahead],
        b.first,
    )


def _reservation(spans: list[ReservationSpan], e: Event, seq: int) -> None:
    if isinstance(e, ReservationStarted):
        spans.append(
            ReservationSpan(
                node=e.node, tier=e.tier, gpus=list(e.gpus), started_at=e.ts, start_seq=seq
            )
        )
        return
    if not spans or spans[-1].reason is not None:
        return
    span = spans[-1]
    if isinstance(e, ReservationGrown) and len(e.gpus) > len(span.gpus):
        span.gpus = list(e.gpus)
    elif isinstance(e, ReservationShrunk) and e.lent_to is not None:
        span.lent_to.append(e.lent_to)
    elif isinstance(e, ReservationReleased):
        span.ended_at, span.end_seq, span.reason = e.ts, seq, e.reason
        span.gpu_seconds, span.tflops, span.charged_now = e.gpu_seconds, e.tflops, e.charged_now
        span.cost = e.gpu_seconds * e.tflops  # F1, as jpu.policy.charging charges it


class WaitFold:
    """`wait_timeline`, one event at a time (for readers that stream the log)."""

    def __init__(
        self,
        job_id: str,
        cluster: Cluster,
        *,
        state: ClusterState | None = None,
        half_life_s: float | None = None,
        samples: int | None = SAMPLES,
    ) -> None:
        self.job_id, self.cluster = job_id, cluster
        self.samples = samples  # None: a step at every queue event (exact, O(events × queue))
        self.cycles = 0  # cycles run (the cost)
        self.next_sample = float("-inf")  # far back: no step before this time
        self.skipped = False
        self.hl = half_life_s or float(getattr(cluster, "half_life_s", DEFAULT_HALF_LIFE_S))
        self.state = state if state is not None else ClusterState.new(cluster, keep_ended=False)
        self.job: JobView | None = self.state.jobs.get(job_id)
        self.clock = 0.0
        self.steps: list[Step] = []
        self.spans: list[ReservationSpan] = []
        self.phases: dict[str, float] = {}
        self.phase_since = self.job.submitted_at if self.job is not None else 0.0
        self.prev_state = self.job.state if self.job is not None else None
        self.lost_rank1: Step | None = None  # the step at which it lost rank 1 while reserving
        self.seen = Seen()

    @property
    def done(self) -> bool:
        """The job ended for good (S2): nothing later changes the answer."""
        return self.job is not None and self.job.terminal and not self.job.oom_pending

    def _spent(self, state: str | None, until: float) -> None:
        name = PHASES.get(state or "") or ("retry_decision" if state == "FAILED" else None)
        if name is not None:  # FAILED before a retry: the X8 decision
            self.phases[name] = self.phases.get(name, 0.0) + max(0.0, until - self.phase_since)

    def apply(self, d: Delivered) -> None:
        st = self.state
        if d.seq <= st.seq or self.done:
            return
        e = d.event
        freeing = self._holds_slot_of_user(e)  # before the fold: does it hold a slot now?
        evolve(st, d)
        self._notice(e, freeing)
        self.clock = max(self.clock, e.ts)
        job = self.job
        if job is None:
            job = self.job = st.job_seen(self.job_id)
            if job is None:
                return
        ours = is_own(e, job)
        if job.state != self.prev_state:
            self._spent(self.prev_state, e.ts)
            self.phase_since, self.prev_state = e.ts, job.state
        if ours:
            _reservation(self.spans, e, d.seq)
            if isinstance(e, ReservationReleased) and e.reason == "demoted" and self.spans:
                _blame(self.spans[-1], self.lost_rank1)
        if ours or (job.state in QUEUED and isinstance(e, QUEUE_EVENTS)) or _sibling(job, e):
            if not ours and self._far(job, e):
                self.skipped = True
                return
            step = _step(st, self.cluster, job, self.clock, d, self.hl, self.seen)
            self.cycles += 1
            if self.skipped and not ours:
                step = msgspec.structs.replace(step, cause=None, sampled=True)
            self.skipped = False
            if self.samples:
                since = job.queue_entered_at or job.submitted_at
                self.next_sample = e.ts + max(0.0, e.ts - since) / self.samples
            steps = self.steps
            if not steps or not _same(steps[-1], step):
                if (
                    step.state == "RESERVING"
                    and step.rank not in (None, 1)
                    and steps
                    and (steps[-1].rank == 1)
                ):
                    self.lost_rank1 = step  # R3: this event took rank 1 from it
                elif step.rank == 1:
                    self.lost_rank1 = None
                steps.append(step)
            if step.cause is not None and step.cause.kind == "promoted_free_slot":
                self._not_waiting_for_a_slot()

    def _holds_slot_of_user(self, e: Event) -> str | None:
        """While the job is in the personal queue: the id of another job of its user that holds
        a slot (S1) before `e`, which is about that job."""
        job = self.job
        if job is None or job.state != "PERSONAL_QUEUE_WAIT" or not isinstance(e, JobEvent):
            return None
        other = self.state.jobs.get(e.job_id)
        if other is None or other is job or other.user != job.user or not other.holds_slot:
            return None
        return other.job_id

    def _notice(self, e: Event, freeing: str | None) -> None:
        """Keep what the causes name: the user's job that freed a slot, the job that freed each
        GPU, where its reservation was, when its wait for GPUs began."""
        seen, job = self.seen, self.job
        if freeing is not None:
            other = self.state.job_seen(freeing)
            if other is None or not other.holds_slot:
                seen.slot_freed.append(freeing)
        to_run = isinstance(e, ReservationReleased) and e.reason == "dispatched"  # kept GPUs
        if isinstance(e, JobEnded | ReservationReleased) and e.job_id != self.job_id:
            for g in e.gpus if e.node is not None and not to_run else ():
                seen.freed[(e.node, g)] = (e.job_id, e.ts)  # type: ignore[index]
        if isinstance(e, ReservationShrunk) and e.reason == "lent" and e.lent_to == self.job_id:
            for g in e.removed:  # R7: lent to this job, which starts on them in this cycle
                seen.lent[(e.node, g)] = e.job_id
        if job is None or not is_own(e, job):
            return
        if isinstance(e, JobPromoted | JobRetryScheduled):
            seen.waits_since = e.ts
        elif isinstance(e, ReservationStarted):
            seen.reserved_on = e.node
        elif isinstance(e, ReservationReleased) and e.reason != "dispatched":
            seen.reserved_on = None
        elif isinstance(e, JobSubmitted):
            seen.slot_freed.clear()

    def _not_waiting_for_a_slot(self) -> None:
        """Promoted with no slot freed since its submission: the user had a free slot, so the
        personal-queue steps before were no wait for one (not ConcurrencyLimit, S1)."""
        steps = self.steps
        for i in range(len(steps) - 2, -1, -1):
            if steps[i].state != "PERSONAL_QUEUE_WAIT":
                break
            if steps[i].pending_reason == "ConcurrencyLimit":  # Held/Dependency stay (Q8, Q9)
                steps[i] = msgspec.structs.replace(steps[i], pending_reason=None)

    def _far(self, job: JobView, e: Event) -> bool:
        """Not worth a step now: far back in the global queue and sampled recently."""
        if not self.samples or job.state != "GLOBAL_QUEUE_WAIT" or not self.steps:
            return False
        if isinstance(e, MaintenanceChanged) or e.ts >= self.next_sample:
            return False
        rank = self.steps[-1].rank
        return rank is not None and rank > NEAR

    def result(self, now: float | None = None) -> WaitTimeline:
        job = self.job
        if job is None:
            raise JobNotInLog(self.job_id)
        end = self.clock
        phases = dict(self.phases)
        if not job.terminal:
            end = max(self.clock, now) if now is not None else self.clock
            name = PHASES.get(job.state)
            if name is not None:
                phases[name] = phases.get(name, 0.0) + max(0.0, end - self.phase_since)
        return WaitTimeline(
            job_id=job.job_id,
            lab=job.lab,
            user=job.user,
            name=job.name,
            num_gpus=job.num_gpus,
            state=job.state,
            attempt=job.attempt,
            submitted_at=job.submitted_at,
            as_of=end,
            seq=self.state.seq,
            steps=list(self.steps),
            reservations=list(self.spans),
            phases=phases,
            terminal=job.terminal,
            final=self.done,
        )


def wait_timeline(
    events: Iterable[Delivered],
    job_id: str,
    cluster: Cluster,
    *,
    state: ClusterState | None = None,
    now: float | None = None,
    half_life_s: float | None = None,
    samples: int | None = SAMPLES,
) -> WaitTimeline:
    """The job's wait, from `events` in stream order (from seq 1, or the tail after `state`, a
    fold restored from a snapshot taken before the job's submission). Stops after the job's
    end for good; `now` (default: the last event's time) closes the phase still running."""
    fold = WaitFold(job_id, cluster, state=state, half_life_s=half_life_s, samples=samples)
    for d in events:
        fold.apply(d)
        if fold.done:
            break
    return fold.result(now)


def _blame(span: ReservationSpan, lost: Step | None) -> None:
    """R3: the reservation was released because the job was no longer rank 1; say what moved
    it (the event of the step where it lost rank 1) and who ranked first then."""
    if lost is None:
        return
    span.demoted_by = lost.cause
    span.overtaken_by, span.overtaken_by_lab = lost.first, lost.first_lab
    for a in lost.ahead:
        if a.lab == lost.first_lab:
            span.overtaken_by_usage = a.usage
