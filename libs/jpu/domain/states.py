"""One job as a fold of its events (SPEC §1.4 S1–S3): every state change is caused by one event.

Job state machine as folded here:
  JobSubmitted → PERSONAL_QUEUE_WAIT; JobPromoted → GLOBAL_QUEUE_WAIT; ReservationStarted →
  RESERVING; ReservationReleased → GLOBAL_QUEUE_WAIT; JobDispatched → DISPATCHED; JobStarted →
  RUNNING; JobCancelRequested → CANCELLING; JobEnded → COMPLETED | FAILED | CANCELLED.
  X8: an attempt that ended FAILED with `oom=True` is `oom_pending` until the dispatcher decides,
  once, and records it: JobRetryScheduled puts it back to GLOBAL_QUEUE_WAIT (attempt + 1,
  queue_entered_at kept), JobRetryDeclined leaves it FAILED for good. While the decision is
  pending the job keeps its slot (S1), so the user's next job is not promoted in between. The
  job's event list therefore shows the attempt's end and then the retry — the one documented
  exception to S2.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from jpu.domain.dependencies import Condition, Dependency, parsed
from jpu.events import (
    Delivered,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobHeld,
    JobPromoted,
    JobReleased,
    JobRetryDeclined,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
)
from jpu.policy.model import QueuedJob, Reservation

GpuKey = tuple[str, str, int]  # (node, tier, index)
# SPEC §1.4 in lifecycle order; every set of job states is written here, once.
STATES: tuple[str, ...] = (
    "PERSONAL_QUEUE_WAIT",
    "GLOBAL_QUEUE_WAIT",
    "RESERVING",
    "DISPATCHED",
    "RUNNING",
    "CANCELLING",
    "COMPLETED",
    "FAILED",
    "CANCELLED",
)
# A state filter (`GET /v1/queue?state=`): one state or comma-separated states, none blank; the
# OpenAPI schema carries this pattern and the route refuses anything else (SPEC §8).
STATE_LIST_PATTERN: str = "^(?:(?:{0})(?:,(?:{0}))*)?$".format("|".join(STATES))
QUEUED = frozenset({"GLOBAL_QUEUE_WAIT", "RESERVING"})  # the global queue (D1)
PENDING = QUEUED | {"PERSONAL_QUEUE_WAIT"}  # not dispatched yet: in either queue
PLACED = frozenset({"DISPATCHED", "RUNNING", "CANCELLING"})  # may hold a placement
SLOT_STATES = QUEUED | PLACED  # S1
TERMINAL = frozenset({"COMPLETED", "FAILED", "CANCELLED"})  # S2


def in_order(states: Iterable[str]) -> tuple[str, ...]:
    """`states` in lifecycle order (for messages, listings and query parameters)."""
    keep = set(states)
    return tuple(s for s in STATES if s in keep)


# json.dumps(body, sort_keys=True) builds a new encoder on every call (only the all-defaults
# call reuses one): every fold pays this per JobSubmitted. Same output, one encoder.
_SORTED_JSON = json.JSONEncoder(sort_keys=True)


def request_digest(event: JobSubmitted) -> str:
    """What makes two submissions "the same body" for Q6 idempotency."""
    body = {
        "name": event.name,
        "command": event.command,
        "num_gpus": event.num_gpus,
        "tiers": sorted(event.tiers) if event.tiers is not None else None,
        "min_vram_gb": event.min_vram_gb,
        "time_limit_s": event.time_limit_s,
        "env": dict(sorted(event.env.items())),
    }
    if event.chdir is not None:  # U5; absent from the digest otherwise (v1 digests unchanged)
        body["chdir"] = event.chdir
    for key in ("mail_type", "mail_user"):  # Q10; likewise absent when not asked for
        if getattr(event, key) is not None:
            body[key] = getattr(event, key)
    if event.dependency is not None:  # Q8, Q9: likewise (v2 digests unchanged)
        body["dependency"] = event.dependency
    if event.hold:
        body["hold"] = True
    if event.workspace is not None:  # X4a; likewise
        body["workspace"] = event.workspace
    if event.array is not None:  # Q7; absent from the digest otherwise
        body["array"] = event.array.spec or event.array.tasks
    for key in ("output", "error", "open_mode", "signal"):  # U6; likewise
        if getattr(event, key) is not None:
            body[key] = getattr(event, key)
    return hashlib.sha256(_SORTED_JSON.encode(body).encode()).hexdigest()


@dataclass(slots=True)
class JobView:
    job_id: str
    lab: str
    user: str
    name: str
    num_gpus: int
    submitted_at: float
    submit_seq: int
    digest: str
    tiers: frozenset[str] | None = None
    min_vram_gb: int | None = None
    time_limit_s: int | None = None
    state: str = "PERSONAL_QUEUE_WAIT"
    attempt: int = 1
    queue_entered_at: float | None = None
    reservation: Reservation | None = None
    placement: tuple[str, str, tuple[int, ...]] | None = None  # (node, tier, gpus)
    dispatched_at: float | None = None
    last_seq: int = 0  # stream seq of the job subject's last event (SPEC E2 expected seq)
    cancel_from: str | None = None  # the state a cancel request found the job in
    uncharged_reserved_gpu_s: float = 0.0  # this attempt's released, not yet charged (R4, F4)
    uncharged_reserved_usage: float = 0.0  # the same in TFLOP-s (tier of each reservation)
    oom_pending: bool = False  # X8: FAILED by GPU OOM, escalation not yet decided
    last_end: JobEnded | None = None
    backend_job_id: str | None = None
    events: int = 0
    started_at: float | None = None  # JobStarted of the current attempt (X6)
    isolation: str | None = None  # what isolation the current attempt got (X4)
    cancel_by: str | None = None  # who asked to cancel it
    dependency: str | None = None  # Q8, as logged (normalised)
    singleton: bool = False  # Q8: one slot-holding job of this name per user
    waiting: list[Condition] | None = None  # Q8: conditions not met yet (the fold resolves them)
    never: str | None = None  # Q8: the condition that can never be met ("afterok:ID")
    held: bool = False  # Q9
    ever_started: bool = False  # some attempt started (Q8 `after`)
    array_id: str | None = None  # Q7: the array this job is a task of
    array_task: int | None = None  # ... its task index
    array_throttle: int | None = None  # ... the array's %N

    @classmethod
    def submitted(
        cls, event: JobSubmitted, seq: int, dependency: Dependency | None = None
    ) -> JobView:
        """The job `event` created; for a task of an array (Q7, derived by
        jpu.domain.arrays.tasks_of) the submit lives on the array's subject, so the task's own
        subject is still empty: its expected last subject sequence is 0 (E2). `dependency`:
        `event.dependency` already read (Q8; a fold reads it once for all of an array's tasks),
        else read here."""
        a = event.array
        task = a is not None and a.array_id is not None
        return cls(
            job_id=event.job_id,
            lab=event.lab,
            user=event.user,
            name=event.name,
            num_gpus=event.num_gpus,
            submitted_at=event.ts,
            submit_seq=seq,
            # Q6 replays an array by its own id, never a task's: a task needs no digest (and
            # hashing each of 10,000 tasks' requests would be most of the array's fold)
            digest="" if task else request_digest(event),
            tiers=frozenset(event.tiers) if event.tiers is not None else None,
            min_vram_gb=event.min_vram_gb,
            time_limit_s=event.time_limit_s,
            last_seq=0 if task else seq,
            events=1,
            dependency=event.dependency,
            singleton=(
                dependency if dependency is not None else parsed(event.dependency)
            ).singleton,
            held=event.hold,
            array_id=a.array_id if a is not None else None,
            array_task=a.tasks[0] if a is not None and task else None,
            array_throttle=a.throttle if a is not None else None,
        )

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    @property
    def final(self) -> str | None:
        """The state it ended in for good (Q8's parent outcome); None while it may still move."""
        return self.state if self.terminal and not self.oom_pending else None

    @property
    def cancel_requested(self) -> bool:
        return self.cancel_from is not None

    @property
    def holds_slot(self) -> bool:
        """S1; a cancel request on a personal-queue job never took a slot; a job whose OOM
        retry is not decided yet keeps its slot (X8)."""
        if self.oom_pending:
            return True
        if self.state == "CANCELLING":
            return self.cancel_from != "PERSONAL_QUEUE_WAIT"
        return self.state in SLOT_STATES

    @property
    def cancelling_dispatched(self) -> bool:
        return self.state == "CANCELLING" and self.placement is not None

    def gpu_holdings(self) -> dict[GpuKey, str]:
        # called several times per event by every fold (P1): one tag string per call, not per GPU
        r, placement = self.reservation, self.placement
        if r is None:
            if placement is None:
                return {}
            node, tier, gpus = placement
            tag = f"job:{self.job_id}"
            return {(node, tier, i): tag for i in gpus}
        reserved = f"reserved:{self.job_id}"
        held = {(r.node, r.tier, i): reserved for i in r.gpus}
        if placement is not None:
            node, tier, gpus = placement
            tag = f"job:{self.job_id}"
            held.update({(node, tier, i): tag for i in gpus})
        return held


def queued_job(j: JobView) -> QueuedJob:
    """The policy core's record of a job in the global queue (SPEC D1: queue_entered_at,
    falling back to the submit time for a job promoted before it was recorded)."""
    entered = j.queue_entered_at if j.queue_entered_at is not None else j.submitted_at
    return QueuedJob(
        job_id=j.job_id,
        lab=j.lab,
        user=j.user,
        num_gpus=j.num_gpus,
        queue_entered_at=entered,
        tiers=j.tiers,
        min_vram_gb=j.min_vram_gb,
        attempt=j.attempt,
        time_limit_s=j.time_limit_s,
        reservation=j.reservation,
    )


def job_view(events: Sequence[Delivered]) -> JobView | None:
    """The job folded from its own events in order, from its JobSubmitted on; None when there is
    none (no such job)."""
    first = next((d for d in events if isinstance(d.event, JobSubmitted)), None)
    if first is None or not isinstance(first.event, JobSubmitted):
        return None
    job = JobView.submitted(first.event, first.seq)
    for d in events:
        if d.seq > first.seq:
            apply_job_event(job, d)
    return job


def apply_job_event(job: JobView, delivered: Delivered) -> None:
    """Move one job by one of its events; an event that does not apply is ignored (S2)."""
    job.last_seq = delivered.seq
    job.events += 1
    e = delivered.event
    if isinstance(e, JobRetryScheduled):
        _retry(job, e)
    elif isinstance(e, JobRetryDeclined):
        if job.oom_pending and e.attempt == job.attempt:
            job.oom_pending = False  # X8: decided once; FAILED for good
    elif isinstance(e, JobCancelRequested) and job.oom_pending:
        job.oom_pending = False  # cancelling a job between OOM and retry: it stays FAILED
        job.cancel_by = e.by
    elif job.terminal:
        return  # S2: a terminal job never changes again (X8 retry above is the exception)
    elif isinstance(e, JobPromoted):
        if job.state == "PERSONAL_QUEUE_WAIT":
            job.state, job.queue_entered_at = "GLOBAL_QUEUE_WAIT", e.queue_entered_at
    elif isinstance(e, ReservationStarted | ReservationGrown):
        _reserve(job, e)
    elif isinstance(e, ReservationShrunk):
        _shrunk(job, e)
    elif isinstance(e, ReservationReleased):
        _released(job, e)
    elif isinstance(e, JobDispatched):
        if job.state in QUEUED:
            job.state, job.attempt, job.dispatched_at = "DISPATCHED", e.attempt, e.ts
            job.placement, job.reservation = (e.node, e.tier, tuple(e.gpus)), None
    elif isinstance(e, JobHeld | JobReleased):
        if job.state == "PERSONAL_QUEUE_WAIT":  # Q9: only in the personal queue
            job.held = isinstance(e, JobHeld)
    elif isinstance(e, JobStarted):
        job.backend_job_id, job.started_at, job.isolation = e.backend_job_id, e.ts, e.isolation
        job.ever_started = True
        if job.state == "DISPATCHED":
            job.state = "RUNNING"
    elif isinstance(e, JobCancelRequested):
        if job.state != "CANCELLING":
            job.cancel_from, job.state, job.cancel_by = job.state, "CANCELLING", e.by
    elif isinstance(e, JobEnded):
        _ended(job, e)


def _reserve(job: JobView, e: ReservationStarted | ReservationGrown) -> None:
    if isinstance(e, ReservationStarted):
        if job.state in QUEUED and job.reservation is None:
            gpus = tuple(e.gpus)
            job.reservation = Reservation(e.node, e.tier, gpus, e.ts, (e.ts,) * len(gpus))
            job.state = "RESERVING"
        return
    r = job.reservation
    if r is None:
        return
    joined = r.joined_at()
    gpus = tuple(e.gpus)
    job.reservation = Reservation(
        r.node, r.tier, gpus, r.since, tuple(joined.get(i, e.ts) for i in gpus)
    )


def _shrunk(job: JobView, e: ReservationShrunk) -> None:
    """R5: the lost GPUs leave; their held time is charged with the attempt's end (F4)."""
    r = job.reservation
    if r is None:
        return
    joined = r.joined_at()
    gpus = tuple(g for g in r.gpus if g not in e.removed)
    job.reservation = Reservation(r.node, r.tier, gpus, r.since, tuple(joined[g] for g in gpus))
    job.uncharged_reserved_gpu_s += e.gpu_seconds
    job.uncharged_reserved_usage += e.gpu_seconds * e.tflops


def _released(job: JobView, e: ReservationReleased) -> None:
    if job.reservation is None:
        return
    job.reservation = None
    if job.state == "RESERVING":
        job.state = "GLOBAL_QUEUE_WAIT"
    if not e.charged_now:  # R4 swap / dispatched / cancelled: charged with the attempt's end
        job.uncharged_reserved_gpu_s += e.gpu_seconds
        job.uncharged_reserved_usage += e.gpu_seconds * e.tflops


def _ended(job: JobView, e: JobEnded) -> None:
    job.state, job.attempt = e.state, max(job.attempt, e.attempt)
    job.placement = job.reservation = None
    job.last_end = e
    job.oom_pending = e.oom and e.state == "FAILED"
    job.uncharged_reserved_gpu_s = job.uncharged_reserved_usage = 0.0  # charged with this end
    if e.backend_job_id:
        job.backend_job_id = e.backend_job_id


def _retry(job: JobView, e: JobRetryScheduled) -> None:
    if not job.oom_pending or e.attempt <= job.attempt:
        return
    job.state, job.attempt, job.min_vram_gb = "GLOBAL_QUEUE_WAIT", e.attempt, e.min_vram_gb
    job.oom_pending = False
    # the new attempt has not been dispatched or started yet
    job.dispatched_at = job.started_at = job.isolation = job.backend_job_id = None
