"""The job view as rows: each row is a function of the domain's JobView (SPEC S1–S3, E3).

There is no state machine here. The row keeps the job's JobView (`view`, jsonb: the very state
the services fold, jpu.fold_jobs), and each event is folded by `apply_job_event`, the services'
own function; the columns the API reads are then derived from the view (`columns`). So the
projection and the services cannot disagree on a job's state, attempt, reservation or placement
(issue 10): a swap release without its dispatch, for instance, returns the job to the global queue
here exactly as in the dispatcher. Besides the view a row holds the request as submitted
(command, env, chdir, the tiers as written) and one accounting fact, `usage_charged` (F4: every
UsageCharged of the job, even after it ended).

`apply_many` loads the rows a batch touches, folds in memory and upserts every changed row once:
one round trip per batch instead of one per event.
"""

from __future__ import annotations

from typing import Any, Final

import asyncpg
import msgspec

from jpu.bus.model import Delivered
from jpu.events import JobEvent, JobSubmitted, UsageCharged
from jpu.fold_jobs import JobView, apply_job_event

Row = dict[str, Any]
_json: Final = msgspec.json.Encoder()
_view_json: Final = msgspec.json.Encoder(order="deterministic")  # sets sorted: rebuilds compare
_view_decoder: Final = msgspec.json.Decoder(JobView)


def columns(view: JobView) -> Row:
    """The columns the API reads, from the job's JobView alone."""
    end = view.last_end
    current_end = end if end is not None and end.attempt == view.attempt else None
    node = tier = gpus = None
    if view.placement is not None:
        node, tier, placed = view.placement
        gpus = list(placed)
    elif current_end is not None and current_end.node is not None:  # where the attempt ran
        node, tier, gpus = current_end.node, current_end.tier, list(current_end.gpus)
    r = view.reservation
    return {
        "state": view.state,
        "attempt": view.attempt,
        "min_vram_gb": view.min_vram_gb,
        "queue_entered_at": view.queue_entered_at,
        "node": node,
        "tier": tier,
        "gpus": gpus,
        "dispatched_at": view.dispatched_at,
        "started_at": view.started_at,
        "ended_at": current_end.ts if current_end is not None and view.terminal else None,
        "reservation_node": r.node if r is not None else None,
        "reservation_tier": r.tier if r is not None else None,
        "reservation_gpus": list(r.gpus) if r is not None else None,
        "reservation_since": r.since if r is not None else None,
        "backend_job_id": view.backend_job_id,
        "isolation": view.isolation,
        # the last ended attempt's facts (X6, X7, X5), also while a retry waits
        "exit_code": end.exit_code if end is not None else None,
        "end_reason": end.reason if end is not None else None,
        "oom": bool(end.oom) if end is not None else False,
        "kill_failed": bool(end.kill_failed) if end is not None else False,
        "cancel_requested_by": view.cancel_by,
        "oom_pending": view.oom_pending,
    }


def _new_row(e: JobSubmitted, view: JobView) -> Row:
    return {
        "job_id": e.job_id, "lab": e.lab, "user": e.user, "name": e.name,
        "num_gpus": e.num_gpus, "tiers": e.tiers, "time_limit_s": e.time_limit_s,
        "env": dict(e.env), "command": e.command, "chdir": e.chdir, "submitted_at": e.ts,
        "usage_charged": 0.0, **columns(view),
    }  # fmt: skip


def _view(row: Row) -> JobView:
    raw = row["view"]
    return _view_decoder.decode(raw if isinstance(raw, bytes | str) else _json.encode(raw))


def evolve(row: Row | None, d: Delivered) -> Row | None:
    """The row after `d` (a new dict), or the same object when the event is not the job's."""
    event = d.event
    if isinstance(event, UsageCharged):
        # Charging happens after the attempt ends (F4): accounting facts, not job state, so
        # they are recorded even on terminal jobs.
        if row is None or not event.job_id or event.amount == 0:
            return row
        return {
            **row,
            "usage_charged": row["usage_charged"] + event.amount,
            "updated_at": event.ts,
            "updated_seq": d.seq,
        }
    if row is None:
        if not isinstance(event, JobSubmitted):
            return None  # an event of a job whose submit was never seen: nothing to show
        view = JobView.submitted(event, d.seq)
        return {**_new_row(event, view), "view": _encoded(view), "updated_at": event.ts,
                "updated_seq": d.seq}  # fmt: skip
    if isinstance(event, JobSubmitted):
        return row  # a second submit of the same id never wins (E2: expected seq 0)
    view = _view(row)
    apply_job_event(view, d)  # the services' own fold (jpu.fold_jobs)
    visible = columns(view)
    new = {**row, **visible, "view": _encoded(view)}
    if any(row.get(k) != v for k, v in visible.items()):
        new["updated_at"], new["updated_seq"] = event.ts, d.seq  # the last visible change
    return new


def _encoded(view: JobView) -> Any:
    return msgspec.json.decode(_view_json.encode(view))  # jsonb travels inside the batch


def _job_id(event: Any) -> str | None:
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
    "updated_seq", "chdir", "oom_pending", "view",
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
            new = evolve(old, d)
            if new is not old and new is not None:
                rows[job_id] = new
                changed.add(job_id)
        if changed:
            payload = _json.encode([rows[j] for j in sorted(changed)]).decode()
            await conn.execute(_UPSERT_JSON, payload)


projection = JobsProjection()
