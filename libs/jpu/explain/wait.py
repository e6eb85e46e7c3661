"""Why a job waited (SPEC U4, D1, D7, R3; issue 14 item 3). Pure: events in, a timeline out.

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
from typing import Final

import msgspec

from jpu.bus import Delivered
from jpu.config import Cluster
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dispatch import DEFAULT_HALF_LIFE_S, snapshot
from jpu.domain.promotion import personal_reason
from jpu.domain.states import QUEUED, JobView
from jpu.events import (
    BackfillEnded,
    Event,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobEvent,
    JobHeld,
    JobPromoted,
    JobReleased,
    JobRetryScheduled,
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


class Cause(msgspec.Struct, frozen=True, kw_only=True):
    """The event that changed the job's standing."""

    seq: int
    at: float
    event: str  # the event type
    job_id: str | None = None  # the job it is about (another job's end, promotion...)
    lab: str | None = None  # that job's lab, or the lab charged
    charge: float | None = None  # TFLOP-s the event charges (or owes) that lab (F4, R3)
    lab_usage: float | None = None  # that lab's decayed usage right after it (D1)


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


def _cause(
    state: ClusterState, d: Delivered, now: float, hl: float, usage: Mapping[str, LabUsage]
) -> Cause:
    e: Event = d.event
    job_id = e.job_id if isinstance(e, JobEvent) else None
    lab: str | None = None
    amount: float | None = None
    if isinstance(e, UsageCharged):
        lab, job_id, amount = e.lab, e.job_id, e.amount
    elif job_id is not None:
        job = state.job_seen(job_id)
        lab = job.lab if job is not None else None
        owed = state.owed.get(charge_id(e.event_id))  # what this event charges (F4, R3)
        if owed is not None:
            lab, amount = owed.lab, owed.amount
    after = None if lab is None else decayed(usage.get(lab, ZERO_USAGE), now, hl)
    return Cause(
        seq=d.seq, at=e.ts, event=type(e).__name__, job_id=job_id, lab=lab, charge=amount,
        lab_usage=after,
    )  # fmt: skip


def _step(
    state: ClusterState, cluster: Cluster, job: JobView, now: float, d: Delivered, hl: float
) -> Step:
    snap = snapshot(state, cluster, hl)
    usage = snap.usage
    if job.state not in QUEUED:
        personal = job.state == "PERSONAL_QUEUE_WAIT"
        reason: str | None = personal_reason(state, job) if personal else None  # D7, Q8, Q9
        own = decayed(usage.get(job.lab, ZERO_USAGE), now, hl)
        return Step(
            seq=d.seq, at=now, state=job.state, rank=None, pending_reason=reason,
            queue_length=len(state.queue), lab_usage=own, ahead=[],
            cause=_cause(state, d, now, hl, usage),
        )  # fmt: skip
    result = cycle(snap, now)  # D1, D3, D7: the dispatcher's own decision at this moment
    order = result.order
    rank = order.index(job.job_id)
    ahead: dict[str, int] = {}
    for jid in order[:rank]:
        other = state.jobs[jid]
        ahead[other.lab] = ahead.get(other.lab, 0) + 1
    labs = [
        LabAhead(lab, decayed(usage.get(lab, ZERO_USAGE), now, hl), n) for lab, n in ahead.items()
    ]
    first = order[0] if rank > 0 else None
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
        first_lab=state.jobs[first].lab if first is not None else None,
        cause=_cause(state, d, now, hl, usage),
    )


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
        evolve(st, d)
        e = d.event
        self.clock = max(self.clock, e.ts)
        job = self.job
        if job is None:
            job = self.job = st.job_seen(self.job_id)
            if job is None:
                return
        ours = isinstance(e, JobEvent) and e.job_id == self.job_id
        if job.state != self.prev_state:
            self._spent(self.prev_state, e.ts)
            self.phase_since, self.prev_state = e.ts, job.state
        if ours:
            _reservation(self.spans, e, d.seq)
            if isinstance(e, ReservationReleased) and e.reason == "demoted" and self.spans:
                _blame(self.spans[-1], self.lost_rank1)
        if ours or (job.state in QUEUED and isinstance(e, QUEUE_EVENTS)):
            if not ours and self._far(job, e):
                self.skipped = True
                return
            step = _step(st, self.cluster, job, self.clock, d, self.hl)
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
