"""SPEC Q10: which notification an event owes, to whom, and the sentence it says. Pure: the
notifier service folds the log through `step` and sends what it returns; `now` is never needed
(every time comes from the events), so a replay decides exactly the same notifications.

Kinds (Slurm's `--mail-type`):
  * BEGIN   — an attempt started (`JobStarted`);
  * END     — the job ended for good: COMPLETED, FAILED or CANCELLED;
  * FAIL    — the job ended FAILED (an END too: one message says both);
  * REQUEUE — an attempt ran out of GPU memory and a retry was scheduled (X8).
An OOM end (`JobEnded(oom=True)`) waits for the dispatcher's decision: `JobRetryScheduled` is a
REQUEUE, `JobRetryDeclined` (or a cancel before the decision) makes it the job's FAIL.

An array (Q7) notifies once for the whole array (Slurm's default): BEGIN when its first task
starts, END (FAIL when a task failed) when its last task ended for good, in one sentence counting
the tasks per final state with the array's charge; a task's REQUEUE is counted in that sentence.
Asked per task (`ARRAY_TASKS`, Slurm's `--mail-type` modifier), every task notifies as a job.

Who: the job's own `mail_type`/`mail_user` when it has them, else the user's defaults from the
last `NotificationSettingsChanged`; e-mail to `mail_user` or the registered address, and the
registered webhook. The charge is the TFLOP-s the log already recorded for the job (each
attempt's `JobEnded.usage` and R3-like `UsageCharged`s, F4) — never recomputed here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from jpu.domain.arrays import tasks_of
from jpu.events import (
    Event,
    JobCancelRequested,
    JobEnded,
    JobRetryDeclined,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    NotificationSettingsChanged,
    UsageCharged,
)
from jpu.policy.mail import ARRAY_TASKS

Channel = Literal["email", "webhook"]
CHANNELS: Final[tuple[Channel, ...]] = ("email", "webhook")


@dataclass(frozen=True, slots=True)
class UserSettings:
    email: str | None = None
    webhook_url: str | None = None
    kinds: tuple[str, ...] = ()


@dataclass(slots=True)
class JobFacts:
    user: str
    name: str
    kinds: tuple[str, ...] | None  # the job's own mail_type; None: the user's defaults
    mail_user: str | None
    started_at: float | None = None  # the current attempt's JobStarted
    charged: float = 0.0  # TFLOP-s recorded so far (F4)
    oom_retries: int = 0
    pending_oom: JobEnded | None = None  # X8: an OOM end awaiting the retry decision
    array_id: str | None = None  # Q7: the array this job is a task of


@dataclass(slots=True)
class ArrayFacts:
    """An array as one notification (Q10): what its tasks did so far."""

    facts: JobFacts  # the array's request: user, name, kinds, mail_user
    total: int
    left: int  # tasks not ended for good
    began: bool = False
    first_start: float | None = None
    last_end: float | None = None
    ended: dict[str, int] = field(default_factory=dict)  # final state -> tasks
    charged: float = 0.0
    oom_retries: int = 0


@dataclass(slots=True)
class NotifyState:
    users: dict[str, UserSettings] = field(default_factory=dict)
    jobs: dict[str, JobFacts] = field(default_factory=dict)  # jobs not ended for good
    arrays: dict[str, ArrayFacts] = field(default_factory=dict)  # arrays with a task left


@dataclass(frozen=True, slots=True)
class Notification:
    """One message for one recipient on one channel; `(event_id, channel, recipient)` is its key
    in the sent-log (at most one per key is ever recorded)."""

    event_id: str
    seq: int
    job_id: str
    kind: str
    channel: Channel
    recipient: str
    subject: str
    text: str


def job_link(console_url: str, job_id: str) -> str:
    """The job's page in the web console (SPEC U2)."""
    return f"{console_url.rstrip('/')}/#/job/{job_id}"


def step(state: NotifyState, seq: int, event: Event, console_url: str) -> list[Notification]:
    """Fold `event` (log position `seq`) into `state`; return the notifications it owes."""
    if isinstance(event, NotificationSettingsChanged):
        kinds = tuple(event.mail_type)
        state.users[event.user] = UserSettings(event.email, event.webhook_url, kinds)
        return []
    if isinstance(event, JobSubmitted):
        own = tuple(event.mail_type) if event.mail_type is not None else None
        tasks = tasks_of(event)  # Q7: an array's one event creates every task
        array_id = event.job_id if tasks[0].job_id != event.job_id else None
        for task in tasks:
            facts = JobFacts(event.user, event.name, own, event.mail_user, array_id=array_id)
            state.jobs[task.job_id] = facts
        if array_id is not None:
            request = JobFacts(event.user, event.name, own, event.mail_user)
            state.arrays[array_id] = ArrayFacts(request, len(tasks), len(tasks))
        return []
    job = state.jobs.get(getattr(event, "job_id", None) or "")
    if isinstance(event, UsageCharged):
        if job is not None and event.reason != "job_end":  # job_end: JobEnded.usage below
            job.charged += event.amount
        return []
    if job is None:
        return []
    job_id: str = event.job_id  # type: ignore[attr-defined]  # every event below is a JobEvent
    if isinstance(event, JobStarted):
        job.started_at = event.ts
        array = _as_one(state, job)
        if array is None:
            return _owed(state, job, seq, event, job_id, "BEGIN", _began(job, job_id, event))
        if array.began:
            return []
        array.began, array.first_start = True, event.ts
        text = _array_began(array, job.array_id or "", job_id, console_url)
        return _owed(state, array.facts, seq, event, job.array_id or "", "BEGIN", text)
    if isinstance(event, JobEnded):
        job.charged += event.usage
        runtime = event.ts - job.started_at if job.started_at is not None else None
        job.started_at = None
        if event.oom and event.state == "FAILED":
            job.pending_oom = event  # X8: REQUEUE or FAIL, the dispatcher decides next
            return []
        return _final(state, job, seq, event, job_id, event, runtime, console_url)
    end = job.pending_oom
    if end is None:
        return []
    if isinstance(event, JobRetryScheduled):
        job.pending_oom, job.oom_retries = None, job.oom_retries + 1
        if _as_one(state, job) is not None:
            return []  # counted in the array's END (Q10: the array notifies once)
        text = _requeued(job, job_id, end, event, console_url)
        return _owed(state, job, seq, event, job_id, "REQUEUE", text)
    if isinstance(event, JobRetryDeclined | JobCancelRequested):
        return _final(state, job, seq, event, job_id, end, None, console_url)
    return []


def _final(
    state: NotifyState,
    job: JobFacts,
    seq: int,
    event: Event,
    job_id: str,
    end: JobEnded,
    runtime: float | None,
    console_url: str,
) -> list[Notification]:
    """The job ended for good: END (and FAIL when it failed); it leaves the fold. A task of an
    array notified as one counts toward it, and the last one's end is the array's END."""
    del state.jobs[job_id]
    array = state.arrays.get(job.array_id) if job.array_id is not None else None
    if array is not None:
        array.left -= 1
        array.ended[end.state] = array.ended.get(end.state, 0) + 1
        array.charged += job.charged
        array.oom_retries += job.oom_retries
        array.last_end = end.ts
        if array.left <= 0:
            del state.arrays[job.array_id or ""]
        if not _per_task(state, array.facts):
            if array.left > 0:
                return []
            kinds = ("END", "FAIL") if array.ended.get("FAILED") else ("END",)
            text = _array_ended(array, job.array_id or "", console_url)
            return _owed(state, array.facts, seq, event, job.array_id or "", kinds, text)
    kinds = ("END", "FAIL") if end.state == "FAILED" else ("END",)
    text = _ended(job, job_id, end, runtime, console_url)
    return _owed(state, job, seq, event, job_id, kinds, text)


def _per_task(state: NotifyState, job: JobFacts) -> bool:
    """Q10: the array's tasks notify one by one (`ARRAY_TASKS`, the job's or the user's)."""
    return ARRAY_TASKS in _wanted(state, job)


def _as_one(state: NotifyState, job: JobFacts) -> ArrayFacts | None:
    """The array `job` is a task of when the array notifies as one; None: `job` notifies."""
    array = state.arrays.get(job.array_id) if job.array_id is not None else None
    return None if array is None or _per_task(state, array.facts) else array


def _wanted(state: NotifyState, job: JobFacts) -> tuple[str, ...]:
    if job.kinds is not None:
        return job.kinds
    return state.users.get(job.user, UserSettings()).kinds


def _owed(
    state: NotifyState,
    job: JobFacts,
    seq: int,
    event: Event,
    job_id: str,
    kinds: str | tuple[str, ...],
    text: str,
) -> list[Notification]:
    kinds = (kinds,) if isinstance(kinds, str) else kinds
    user = state.users.get(job.user, UserSettings())
    wanted = _wanted(state, job)
    kind = next((k for k in reversed(kinds) if k in wanted), None)  # FAIL says more than END
    if kind is None:
        return []
    subject = f"[JPU-Share] {job.name} ({job_id}) {kind}"
    to: tuple[tuple[Channel, str | None], ...] = (
        ("email", job.mail_user or user.email),
        ("webhook", user.webhook_url),
    )
    return [
        Notification(event.event_id, seq, job_id, kind, channel, recipient, subject, text)
        for channel, recipient in to
        if recipient
    ]


def _label(job: JobFacts, job_id: str) -> str:
    return f"Job {job_id} ({job.name})"


def _began(job: JobFacts, job_id: str, e: JobStarted) -> str:
    return f"{_label(job, job_id)} started attempt {e.attempt}."


def _ended(job: JobFacts, job_id: str, e: JobEnded, runtime: float | None, console_url: str) -> str:
    parts = [f"{_label(job, job_id)} ended {e.state}"]
    if e.exit_code is not None:
        parts.append(f"with exit code {e.exit_code}")
    if e.reason and e.state != "COMPLETED":
        parts.append(f"({e.reason})")
    parts.append(f"after {duration(runtime)}" if runtime is not None else "without running")
    parts.append(f"on attempt {e.attempt}")
    if job.oom_retries:
        parts.append(f"(retried {_times(job.oom_retries)} after running out of GPU memory)")
    return " ".join(parts) + f", charged {tflops_s(job.charged)}: {job_link(console_url, job_id)}"


def _array_began(array: ArrayFacts, array_id: str, task_id: str, console_url: str) -> str:
    return (
        f"Array {array_id} ({array.facts.name}) started: task {task_id} is the first of its "
        f"{array.total} tasks to run: {job_link(console_url, array_id)}"
    )


def _array_ended(array: ArrayFacts, array_id: str, console_url: str) -> str:
    counts = ", ".join(
        f"{array.ended[s]} {s}" for s in ("COMPLETED", "FAILED", "CANCELLED") if s in array.ended
    )
    parts = [f"Array {array_id} ({array.facts.name}) ended: {counts} of {array.total} tasks"]
    if array.first_start is not None and array.last_end is not None:
        span = duration(array.last_end - array.first_start)
        parts.append(f"in {span} from first start to last end")
    else:
        parts.append("without running")
    text = " ".join(parts)
    if array.oom_retries:
        text += f", {array.oom_retries} OOM {'retry' if array.oom_retries == 1 else 'retries'} (X8)"
    return text + f", charged {tflops_s(array.charged)}: {job_link(console_url, array_id)}"


def _requeued(
    job: JobFacts, job_id: str, end: JobEnded, e: JobRetryScheduled, console_url: str
) -> str:
    return (
        f"{_label(job, job_id)} ran out of GPU memory on attempt {end.attempt} and was requeued "
        f"as attempt {e.attempt} needing at least {e.min_vram_gb} GB of VRAM (X8), charged "
        f"{tflops_s(job.charged)} so far: {job_link(console_url, job_id)}"
    )


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


def duration(seconds: float) -> str:
    """`1h 02m 03s`, `4m 05s`, `7s`."""
    s = max(round(seconds), 0)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h {m:02d}m {sec:02d}s"
    return f"{m}m {sec:02d}s" if m else f"{sec}s"


def tflops_s(amount: float) -> str:
    return f"{amount:,.0f} TFLOP-s"


def retry_delay(attempts: int, base_s: float, max_s: float) -> float:
    """Seconds before try `attempts + 1` of a notification whose receiver refused `attempts`
    times: exponential, bounded (Q10: retried with backoff while the receiver is down)."""
    return float(min(base_s * 2 ** max(attempts - 1, 0), max_s))
