"""The job view: a fold of job events (SPEC S1–S3).

`next_state` is the pure state machine (services reuse it to decide whether an event is legal);
`evolve` folds one event into a row (a plain dict keyed by column). `apply_many` loads the rows a
batch touches, folds in memory and upserts every changed row once: one round trip per batch
instead of one per event.

OOM escalation (X8): the retry moves the job back to GLOBAL_QUEUE_WAIT with attempt + 1, so the
emitter appends `JobRetryScheduled(attempt=n+1)` BEFORE the failed attempt's `JobEnded(attempt=n)`.
A JobEnded for an attempt older than the job's current attempt only closes that attempt (records
its exit code / OOM verdict) and never ends the job.
"""

from __future__ import annotations

from typing import Any, Final

import asyncpg
import msgspec

from jpu.bus.model import Delivered
from jpu.events import (
    Event,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobEvent,
    JobPromoted,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    ReservationGrown,
    ReservationReleased,
    ReservationStarted,
    UsageCharged,
)

PQW: Final = "PERSONAL_QUEUE_WAIT"
GQW: Final = "GLOBAL_QUEUE_WAIT"
RESERVING: Final = "RESERVING"
DISPATCHED: Final = "DISPATCHED"
RUNNING: Final = "RUNNING"
CANCELLING: Final = "CANCELLING"
TERMINAL: Final = frozenset({"COMPLETED", "FAILED", "CANCELLED"})  # S2
SLOT_HOLDING: Final = frozenset({GQW, RESERVING, DISPATCHED, RUNNING, CANCELLING})  # S1
QUEUED: Final = frozenset({GQW, RESERVING})
_CHARGED_RELEASES: Final = frozenset({"demoted", "maintenance", "capacity"})  # R3, R5

Row = dict[str, Any]
_json: Final = msgspec.json.Encoder()


def next_state(current: str | None, event: Event, *, attempt: int | None = None) -> str | None:
    """The state `event` moves a job in `current` to, or None if it changes no state (S3).

    `attempt` is the job's current attempt; when given, stale attempt events are ignored.
    """
    if current is None:
        return PQW if isinstance(event, JobSubmitted) else None
    if current in TERMINAL:
        return None  # S2
    stale = attempt is not None and getattr(event, "attempt", attempt) < attempt
    match event:
        case JobPromoted() if current == PQW:
            return GQW
        case ReservationStarted() if current == GQW:
            return RESERVING
        case ReservationReleased(reason=r) if current == RESERVING and r in _CHARGED_RELEASES:
            return GQW
        case JobDispatched() if current in QUEUED and not stale:
            return DISPATCHED
        case JobStarted() if current == DISPATCHED and not stale:
            return RUNNING
        case JobRetryScheduled() if current != CANCELLING and current != PQW:
            fresh = attempt is None or event.attempt > attempt
            return GQW if fresh else None
        case JobCancelRequested() if current != CANCELLING:
            return CANCELLING
        case JobEnded() if not stale:
            return event.state
    return None


def _new_row(e: JobSubmitted) -> Row:
    row: Row = dict.fromkeys(COLUMNS)  # every column; NULL unless set below
    row.update(job_id=e.job_id, lab=e.lab, user=e.user, name=e.name, num_gpus=e.num_gpus,
               tiers=e.tiers, min_vram_gb=e.min_vram_gb, time_limit_s=e.time_limit_s,
               env=dict(e.env), command=e.command, state=PQW, attempt=1, submitted_at=e.ts,
               oom=False, usage_charged=0.0, kill_failed=False)  # fmt: skip
    return row


_NO_RESERVATION: Final = {
    "reservation_node": None,
    "reservation_tier": None,
    "reservation_gpus": None,
    "reservation_since": None,
}


def _changes(row: Row, event: Event, state: str | None) -> Row:
    """The column updates `event` makes to a non-terminal job row moving to `state` (or None)."""
    cancelling = row["state"] == CANCELLING and getattr(event, "attempt", 0) >= row["attempt"]
    match event:
        case JobPromoted() if state:
            return {"queue_entered_at": event.queue_entered_at}
        case ReservationStarted() if state:
            return {
                "reservation_node": event.node,
                "reservation_tier": event.tier,
                "reservation_gpus": list(event.gpus),
                "reservation_since": event.ts,
            }
        case ReservationGrown() if row["state"] == RESERVING:
            return {"reservation_gpus": list(event.gpus)}
        case ReservationReleased() if row["reservation_node"] is not None:
            return dict(_NO_RESERVATION)
        case JobDispatched() if state or cancelling:  # a cancel may race a dispatch
            return {
                "node": event.node,
                "tier": event.tier,
                "gpus": list(event.gpus),
                "attempt": event.attempt,
                "dispatched_at": event.ts,
                **_NO_RESERVATION,
            }
        case JobStarted() if state or cancelling:
            return {
                "backend_job_id": event.backend_job_id,
                "isolation": event.isolation,
                "started_at": event.ts,
            }
        case JobRetryScheduled() if state:  # X8: keeps queue_entered_at
            return {
                "attempt": event.attempt,
                "ended_at": None,
                "min_vram_gb": event.min_vram_gb,
                "node": None,
                "tier": None,
                "gpus": None,
                "backend_job_id": None,
                "dispatched_at": None,
                "started_at": None,
                **_NO_RESERVATION,
            }
        case JobCancelRequested() if state:
            return {"cancel_requested_by": event.by}
        case JobEnded():
            return _ended(event, final=state is not None)
    return {}


def _ended(e: JobEnded, *, final: bool) -> Row:
    attempt_facts: Row = {
        "exit_code": e.exit_code,
        "oom": e.oom,
        "end_reason": e.reason,
        "kill_failed": e.kill_failed,
    }
    if not final:
        return attempt_facts  # an older attempt closed after its retry (X8)
    facts: Row = {**attempt_facts, "ended_at": e.ts, **_NO_RESERVATION}
    if e.backend_job_id:
        facts["backend_job_id"] = e.backend_job_id
    if e.node is not None:
        facts.update(node=e.node, tier=e.tier, gpus=list(e.gpus))
    return facts


def _oom_retry(row: Row, event: Event) -> bool:
    """X8: JobRetryScheduled after an attempt that FAILED by GPU OOM (and was not cancelled).

    The agent reports the attempt's end (FAILED, oom) and the dispatcher then decides to retry:
    the job goes back to GLOBAL_QUEUE_WAIT keeping queue_entered_at, without resubmission.
    """
    return (
        isinstance(event, JobRetryScheduled)
        and row["state"] == "FAILED"
        and bool(row["oom"])
        and row.get("cancel_requested_by") is None
        and event.attempt > row["attempt"]
    )


def evolve(row: Row | None, event: Event, seq: int) -> Row | None:
    """The row after `event` (a new dict), or the same object when nothing changes."""
    if isinstance(event, UsageCharged):
        # Charging happens after the attempt ends (F4): accounting facts, not job state, so
        # they are recorded even on terminal jobs.
        if row is None or not event.job_id or event.amount == 0:
            return row
        return {
            **row,
            "usage_charged": row["usage_charged"] + event.amount,
            "updated_at": event.ts,
            "updated_seq": seq,
        }
    if row is None:
        if isinstance(event, JobSubmitted):
            return {**_new_row(event), "updated_at": event.ts, "updated_seq": seq}
        return None
    if row["state"] not in TERMINAL:
        state = next_state(row["state"], event, attempt=row["attempt"])
    elif _oom_retry(row, event):
        state = GQW  # X8: the one documented exception to S2 (see _oom_retry)
    else:
        return row  # S2
    changes = _changes(row, event, state)
    if state is not None:
        changes["state"] = state
    if not changes:
        return row
    return {**row, **changes, "updated_at": event.ts, "updated_seq": seq}


def _job_id(event: Event) -> str | None:
    if isinstance(event, JobEvent):
        return event.job_id
    if isinstance(event, UsageCharged):
        return event.job_id
    return None


# fmt: off
COLUMNS: Final = (
    "job_id", "lab", "user", "name", "num_gpus", "tiers", "min_vram_gb", "time_limit_s", "env",
    "command", "state", "attempt", "queue_entered_at", "submitted_at", "node", "tier", "gpus",
    "dispatched_at", "started_at", "ended_at", "reservation_node", "reservation_tier",
    "reservation_gpus", "reservation_since", "backend_job_id", "isolation", "exit_code",
    "end_reason", "oom", "usage_charged", "kill_failed", "cancel_requested_by", "updated_at",
    "updated_seq",
)
# fmt: on
_QUOTED: Final = [f'"{c}"' for c in COLUMNS]
# One statement per batch: the changed rows travel as one JSON array (arrays, jsonb and NULLs
# included): one round trip, however many rows the batch changed.
_UPSERT_JSON: Final = (
    f"INSERT INTO jobs ({', '.join(_QUOTED)}) "
    f"SELECT {', '.join(_QUOTED)} FROM jsonb_populate_recordset(NULL::jobs, $1::text::jsonb) "
    "ON CONFLICT (job_id) DO UPDATE SET " + ", ".join(f"{q} = EXCLUDED.{q}" for q in _QUOTED[1:])
)
_SELECT: Final = f"SELECT {', '.join(_QUOTED)} FROM jobs WHERE job_id = ANY($1::text[])"


class JobsProjection:
    name = "jobs"
    tables: tuple[str, ...] = ("jobs",)

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        await self.apply_many(conn, [d])

    async def apply_many(self, conn: asyncpg.Connection, batch: list[Delivered]) -> None:
        ids = {i for d in batch if (i := _job_id(d.event)) is not None}
        if not ids:
            return
        rows: dict[str, Row] = {r["job_id"]: dict(r) for r in await conn.fetch(_SELECT, list(ids))}
        changed: set[str] = set()
        for d in batch:
            job_id = _job_id(d.event)
            if job_id is None:
                continue
            old = rows.get(job_id)
            new = evolve(old, d.event, d.seq)
            if new is not old and new is not None:
                rows[job_id] = new
                changed.add(job_id)
        if changed:
            payload = _json.encode([rows[j] for j in sorted(changed)]).decode()
            await conn.execute(_UPSERT_JSON, payload)


projection = JobsProjection()
