"""The job view as rows: each row is a function of the domain's JobView (SPEC S1–S3, E3).

There is no state machine here. The row keeps the job's JobView (`view`, jsonb: the very state
the services fold, jpu.domain.states), and each event is folded by `apply_job_event`, the services'
own function; the columns the API reads are then derived from the view (`columns`). So the
projection and the services cannot disagree on a job's state, attempt, reservation or placement
(SPEC E3): a swap release without its dispatch, for instance, returns the job to the global queue
here exactly as in the dispatcher. Besides the view a row holds the request as submitted
(command, env, chdir, the tiers as written) and one accounting fact, `usage_charged` (F4: every
UsageCharged of the job, even after it ended).

`apply_many` loads the rows a batch touches, folds every event of a job into its JobView in memory
and upserts each changed row once, its view encoded once: one round trip per batch instead of
one per event.
"""

from __future__ import annotations

from typing import Any, Final

import asyncpg
import msgspec

from jpu.bus.model import Delivered
from jpu.domain.arrays import tasks_of
from jpu.domain.states import JobView, apply_job_event
from jpu.events import JobEvent, JobSubmitted, UsageCharged

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


def new_row(e: JobSubmitted, view: JobView) -> Row:
    """The row of a job as its JobSubmitted and its JobView leave it (the gateway answers a
    submit with it before the projection wrote it)."""
    return {
        "job_id": e.job_id, "lab": e.lab, "user": e.user, "name": e.name,
        "num_gpus": e.num_gpus, "tiers": e.tiers, "time_limit_s": e.time_limit_s,
        "env": dict(e.env), "command": e.command, "chdir": e.chdir, "submitted_at": e.ts,
        "workspace": e.workspace, "usage_charged": 0.0, "array_id": view.array_id,
        "array_task": view.array_task, "sbatch": _sbatch(e), **columns(view),
    }  # fmt: skip


def _sbatch(e: JobSubmitted) -> dict[str, Any] | None:
    """U6: the sbatch fields of the request (-o/-e/--open-mode/--signal, the warnings)."""
    keys = ("output", "error", "open_mode", "signal")
    out: dict[str, Any] = {k: getattr(e, k) for k in keys if getattr(e, k) is not None}
    if e.sbatch_warnings:
        out["warnings"] = list(e.sbatch_warnings)
    return out or None


def step(rows: dict[str, Row], views: dict[str, JobView], job_id: str, d: Delivered) -> bool:
    """Fold `d` into job `job_id`'s row (in `rows`, changed in place) and its JobView (in
    `views`, decoded from the row's `view` on first use); True when the row changed."""
    event = d.event
    row = rows.get(job_id)
    if isinstance(event, UsageCharged):
        # Charging happens after the attempt ends (F4): accounting facts, not job state, so
        # they are recorded even on terminal jobs.
        if row is None or not event.job_id or event.amount == 0:
            return False
        row["usage_charged"] += event.amount
        row["updated_at"], row["updated_seq"] = event.ts, d.seq
        return True
    if row is None:
        if not isinstance(event, JobSubmitted):
            return False  # an event of a job whose submit was never seen: nothing to show
        new = views[job_id] = JobView.submitted(event, d.seq)
        rows[job_id] = {**new_row(event, new), "updated_at": event.ts, "updated_seq": d.seq}
        return True
    if isinstance(event, JobSubmitted):
        return False  # a second submit of the same id never wins (E2: expected seq 0)
    found = views.get(job_id)
    view = found if found is not None else views.setdefault(job_id, _view(row))
    apply_job_event(view, d)  # the services' own fold (jpu.domain.states)
    visible = columns(view)
    if any(row.get(k) != v for k, v in visible.items()):
        row["updated_at"], row["updated_seq"] = event.ts, d.seq  # the last visible change
    row.update(visible)
    return True


def _view(row: Row) -> JobView:
    raw = row["view"]
    return _view_decoder.decode(raw if isinstance(raw, bytes | str) else _json.encode(raw))


def _view_bytes(row: Row, view: JobView | None) -> bytes:
    if view is not None:
        return _view_json.encode(view)
    raw = row["view"]  # untouched: as read (text from _SELECT)
    return (
        raw.encode()
        if isinstance(raw, str)
        else raw
        if isinstance(raw, bytes)
        else _json.encode(raw)
    )


def _with_view(row: Row, view: JobView | None) -> Row:
    """The row to write, its view as raw JSON inside the batch's payload (encoded once)."""
    return {**row, "view": msgspec.Raw(_view_bytes(row, view))}


def evolve(row: Row | None, d: Delivered) -> Row | None:
    """One event on one row (pure): the row after `d` (a new dict, its view as JSON text), or the
    same object when the event is not the job's. `apply_many` is the same fold over a batch."""
    job_id = _job_id(d.event)
    if job_id is None:
        return row
    rows = {} if row is None else {job_id: dict(row)}
    views: dict[str, JobView] = {}
    if not step(rows, views, job_id, d):
        return row
    new = rows[job_id]
    return {**new, "view": _view_bytes(new, views.get(job_id)).decode()}


def expand_arrays(batch: list[Delivered]) -> list[Delivered]:
    """Q7: an array's one JobSubmitted as one submit per task (same seq), each task a row."""
    if not any(isinstance(d.event, JobSubmitted) and d.event.array is not None for d in batch):
        return batch
    out: list[Delivered] = []
    for d in batch:
        if isinstance(d.event, JobSubmitted) and d.event.array is not None:
            out += [msgspec.structs.replace(d, event=t) for t in tasks_of(d.event)]
        else:
            out.append(d)
    return out


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
    "updated_seq", "chdir", "oom_pending", "array_id", "array_task", "view", "workspace",
    "sbatch",
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
# `view` as text: decoded straight into a JobView (msgspec), only for jobs an event changes
_SELECT: Final = (
    "SELECT " + ", ".join(q for q in _QUOTED if q != '"view"') + ', "view"::text AS "view" '
    "FROM jobs WHERE job_id = ANY($1::text[])"
)


class JobsProjection:
    name = "jobs"
    tables: tuple[str, ...] = ("jobs",)

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        await self.apply_many(conn, [d])

    async def apply_many(self, conn: asyncpg.Connection, batch: list[Delivered]) -> None:
        batch = expand_arrays(batch)
        ids = {i for d in batch if (i := _job_id(d.event)) is not None}
        if not ids:
            return
        rows: dict[str, Row] = {r["job_id"]: dict(r) for r in await conn.fetch(_SELECT, list(ids))}
        views: dict[str, JobView] = {}
        changed: set[str] = set()
        for d in batch:  # many events of one job: folded in memory, its row written once
            job_id = _job_id(d.event)
            if job_id is not None and step(rows, views, job_id, d):
                changed.add(job_id)
        if changed:
            payload = [_with_view(rows[j], views.get(j)) for j in sorted(changed)]
            await conn.execute(_UPSERT_JSON, _json.encode(payload).decode())


projection = JobsProjection()
