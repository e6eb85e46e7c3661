"""A job's attempts from its events, and each OOM retry told in one sentence (SPEC X6–X8). Pure.

It reads the events as `GET /v1/jobs/{id}/events` shows them (dicts with a `type`), so the
gateway (from the log) and any client (from that endpoint) tell the same story:

* attempt 1 begins with `JobSubmitted`, attempt n+1 with `JobRetryScheduled(attempt=n+1)`;
  `JobDispatched` / `JobStarted` / `JobEnded` carry the attempt they belong to (E1);
* after a GPU OOM (X7) the dispatcher records the decision once (X8): `JobRetryScheduled`
  (retry needing more than the tier's VRAM) or `JobRetryDeclined` (reason `max_attempts` or
  `no_fit`, and the VRAM a retry would have needed). Until one of them is in the log, whether
  the retry is still open (pending) or was called off by a cancel (cancelled) is the job fold's
  answer, `JobView.oom_pending` (jpu.domain.states), passed in: it is not decided twice.

The order of those events does not matter: every fact is keyed by its attempt number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

from jpu.domain.states import PENDING

Decision = Literal["scheduled", "declined", "pending", "cancelled"]
WAITING: Final = "WAITING"  # an attempt not dispatched yet (its job is queued)


@dataclass
class RetryDecision:
    """What was decided after an attempt's GPU OOM (X8)."""

    decision: Decision
    min_vram_gb: int | None = None  # scheduled: the next attempt needs more than the tier had
    reason: str | None = None  # declined: max_attempts | no_fit
    needed_vram_gb: int | None = None  # declined: what a retry would have needed


@dataclass
class Attempt:
    attempt: int
    state: str = WAITING  # WAITING, DISPATCHED, RUNNING, then JobEnded's state
    tier: str | None = None
    node: str | None = None
    gpus: list[int] = field(default_factory=list)
    dispatched_at: float | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None
    reason: str | None = None
    oom: bool = False
    host_oom: bool = False
    gpu_seconds: float | None = None  # JobEnded's startup + run GPU-seconds (X6, F5), once ended
    backend_job_id: str | None = None
    retry: RetryDecision | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def attempts(events: Iterable[Mapping[str, Any]], *, oom_pending: bool) -> list[Attempt]:
    """The job's attempts, first first, from its events (any order); `oom_pending`: the job
    fold's X8 answer for an OOM end with no recorded decision (`JobView.oom_pending`)."""
    by_number: dict[int, Attempt] = {}
    scheduled: dict[int, int] = {}  # failed attempt -> min_vram_gb of its retry
    declined: dict[int, Mapping[str, Any]] = {}

    def get(n: int) -> Attempt:
        return by_number.setdefault(n, Attempt(n))

    for e in events:
        kind, n = e.get("type"), e.get("attempt")
        if kind == "JobSubmitted":
            get(1)
        elif kind == "JobRetryScheduled" and isinstance(n, int):
            get(n)
            scheduled[n - 1] = int(e["min_vram_gb"])
        elif kind == "JobRetryDeclined" and isinstance(n, int):
            declined[n] = e
        elif kind in ("JobDispatched", "JobStarted", "JobEnded") and isinstance(n, int):
            _attempt_event(get(n), e)
    for a in by_number.values():
        if a.oom and a.state == "FAILED":
            a.retry = _decision(a, scheduled, declined, oom_pending)
    return [by_number[n] for n in sorted(by_number)]


def _attempt_event(a: Attempt, e: Mapping[str, Any]) -> None:
    kind = e["type"]
    if kind == "JobDispatched":
        a.node, a.tier, a.gpus = e.get("node"), e.get("tier"), list(e.get("gpus") or [])
        a.dispatched_at = e.get("ts")
        if a.state == WAITING:
            a.state = "DISPATCHED"
    elif kind == "JobStarted":
        a.started_at, a.backend_job_id = e.get("ts"), e.get("backend_job_id")
        if a.state in (WAITING, "DISPATCHED"):
            a.state = "RUNNING"
    else:  # JobEnded: the attempt's final facts (X6)
        a.state, a.ended_at = str(e.get("state")), e.get("ts")
        a.exit_code, a.reason = e.get("exit_code"), e.get("reason")
        a.oom, a.host_oom = bool(e.get("oom")), bool(e.get("host_oom"))
        # F5: held from the dispatch: the start-up (JobEnded v2) and the run
        a.gpu_seconds = float(e.get("gpu_seconds_startup") or 0.0) + float(
            e.get("gpu_seconds_run") or 0.0
        )
        a.node = e.get("node") or a.node
        a.tier = e.get("tier") or a.tier
        a.gpus = list(e.get("gpus") or a.gpus)
        a.backend_job_id = e.get("backend_job_id") or a.backend_job_id


def _decision(
    a: Attempt,
    scheduled: Mapping[int, int],
    declined: Mapping[int, Mapping[str, Any]],
    oom_pending: bool,
) -> RetryDecision:
    if a.attempt in scheduled:
        return RetryDecision("scheduled", min_vram_gb=scheduled[a.attempt])
    if a.attempt in declined:
        d = declined[a.attempt]
        needed = d.get("needed_vram_gb")
        return RetryDecision("declined", reason=d.get("reason"), needed_vram_gb=needed)
    # S2/X8: only a cancel closes it
    return RetryDecision("pending" if oom_pending else "cancelled")


def from_row(row: Mapping[str, Any]) -> Attempt:
    """The latest attempt as the jobs projection holds it (enough when there was only one and
    no OOM: then the row and the events tell the same)."""
    state = row["state"]
    if state in PENDING:
        state = WAITING
    elif state == "CANCELLING":
        state = "RUNNING" if row["started_at"] else "DISPATCHED" if row["node"] else WAITING
    ended = row["ended_at"]
    gpu_seconds = None
    if ended is not None and row["dispatched_at"] is not None:
        gpu_seconds = row["num_gpus"] * max(0.0, ended - row["dispatched_at"])
    return Attempt(
        attempt=row["attempt"],
        state=state,
        tier=row["tier"],
        node=row["node"],
        gpus=list(row["gpus"] or []),
        dispatched_at=row["dispatched_at"],
        started_at=row["started_at"],
        ended_at=ended,
        exit_code=row["exit_code"],
        reason=row["end_reason"],
        oom=bool(row["oom"]),
        gpu_seconds=gpu_seconds,
        backend_job_id=row["backend_job_id"],
    )


def gpu_seconds(items: Iterable[Attempt], num_gpus: int, now: float) -> float:
    """GPU-seconds held by every attempt (from its dispatch to its end, F5); one still running
    counts up to `now`."""
    total = 0.0
    for a in items:
        if a.gpu_seconds is not None:
            total += a.gpu_seconds
        elif a.dispatched_at is not None and a.ended_at is None:
            total += num_gpus * max(0.0, now - a.dispatched_at)
    return total


def explain(
    items: list[Attempt], vram: Mapping[str, int], max_attempts: int | None = None
) -> list[str]:
    """One sentence per attempt that ran out of memory (X7, X8), e.g. "attempt 1 ran out of
    GPU memory on rtx3080ti (12 GB); retrying on a GPU with more than 12 GB"."""
    nexts = {a.attempt: a for a in items}
    return [
        s
        for a in items
        if (s := sentence(a, nexts.get(a.attempt + 1), vram, max_attempts)) is not None
    ]


def sentence(
    a: Attempt, nxt: Attempt | None, vram: Mapping[str, int], max_attempts: int | None = None
) -> str | None:
    """The sentence for attempt `a` (None unless it ran out of memory); `nxt` is the attempt
    after it, if any; `vram`: tier name → GB."""
    if a.host_oom and not a.oom:
        where = f" on {a.node}" if a.node else ""
        return (
            f"attempt {a.attempt} ran out of host memory (RAM){where}; only GPU out-of-memory "
            "is retried on a bigger GPU (SPEC X7), and a job's RAM comes with its GPUs "
            "(the tier's mem_gb_per_gpu): ask for more GPUs or use less memory"
        )
    if not a.oom or a.retry is None:
        return None
    r = a.retry
    asked = r.min_vram_gb or r.needed_vram_gb  # more than the tier had: its VRAM + 1 (X8)
    gb = vram.get(a.tier or "", asked - 1 if asked else None)
    on = f" on {a.tier} ({gb} GB)" if a.tier and gb else f" on {a.tier}" if a.tier else ""
    more = f"more than {gb} GB" if gb else "more memory"
    head = f"attempt {a.attempt} ran out of GPU memory{on}"
    if r.decision == "scheduled":
        if nxt is not None and nxt.tier is not None:
            nxt_gb = vram.get(nxt.tier)
            size = f" ({nxt_gb} GB)" if nxt_gb else ""
            return f"{head}; retried as attempt {nxt.attempt} on {nxt.tier}{size}"
        return f"{head}; retrying on a GPU with {more}"
    if r.decision == "declined" and r.reason == "no_fit":
        return f"{head}; no GPU with {more} exists here, so the job failed"
    if r.decision == "declined":
        many = "s" if max_attempts != 1 else ""
        last = f"the last of {max_attempts} attempt{many}" if max_attempts else "the last attempt"
        return f"{head}; it was {last} allowed (max_attempts), so the job failed"
    if r.decision == "cancelled":
        return f"{head}; it was not retried: the job was cancelled"
    return f"{head}; deciding whether to retry it on a GPU with {more}"
