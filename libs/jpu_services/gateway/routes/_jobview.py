"""The job as the API shows it (SPEC §8 `GET /v1/jobs/{id}`), and who may see it.

Visibility (SPEC §8): the owner, a `lab_admin` of the job's lab, or an `admin`. Anyone else gets
403 FORBIDDEN for a job that exists (the same answer for GET, events and cancel, so the three agree)
and 404 NOT_FOUND for an id that does not exist. Job ids are random, so 403 reveals nothing useful.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

import asyncpg

from jpu.bus import EventBus
from jpu.domain import jobids
from jpu.domain.states import PLACED, QUEUED, TERMINAL, in_order, job_view  # SPEC §1.4
from jpu.store import auth
from jpu_services.gateway.errors import RETRY_AFTER_S, ApiError

QUEUED_STATES: Final = in_order(QUEUED)
RUNNING_STATES: Final = in_order(PLACED)

# Columns the API shows; `env` and `command` only on the job page (never in lists or the queue).
_LIST_COLUMNS: Final = (
    'job_id, lab, "user", name, num_gpus, tiers, min_vram_gb, time_limit_s, state, attempt, '
    "queue_entered_at, submitted_at, node, tier, gpus, dispatched_at, started_at, ended_at, "
    "reservation_node, reservation_tier, reservation_gpus, reservation_since, backend_job_id, "
    "isolation, exit_code, end_reason, oom, usage_charged, kill_failed, cancel_requested_by, "
    "chdir, workspace, array_id, array_task, (view->>'array_throttle')::int AS array_throttle, "
    "view->>'dependency' AS dependency, "  # Q8, Q9: kept in the row's JobView
    "coalesce((view->>'held')::boolean, false) AS held"
)


def can_see(user: auth.Principal, row: Any) -> bool:
    return (
        user.role == "admin"
        or row["user"] == user.name
        or (user.role == "lab_admin" and row["lab"] == user.lab)
    )


PREFIX_CANDIDATES: Final = 10  # an ambiguous prefix lists at most this many of its jobs
MIN_OTHERS_PREFIX: Final = 8  # U8: a prefix this long finds a job the caller may not see (403)


async def load_visible(pool: asyncpg.Pool, user: auth.Principal, job_id: str) -> asyncpg.Record:
    """The job row if the caller may see it; 404 / 403 otherwise. `job_id` may be any unique
    prefix of the id, like git's (among the jobs the caller may see): the row's `job_id` is
    the full id, which the route uses from then on. An ambiguous prefix is a 422 naming the
    candidates, so a script never acts on a job it did not mean."""
    row = await pool.fetchrow(
        f"SELECT {_LIST_COLUMNS}, command, env, sbatch FROM jobs WHERE job_id = $1", job_id
    )
    if row is None:
        row = await _by_prefix(pool, user, job_id)
    if row is None:
        raise ApiError(404, "NOT_FOUND", f"no job {job_id!r}", {"job_id": job_id})
    if not can_see(user, row):
        raise ApiError(
            403,
            "FORBIDDEN",
            "only the owner, a lab_admin of its lab or an admin may see or cancel this job",
            {"job_id": job_id},
        )
    return row


async def load_array(
    pool: asyncpg.Pool, user: auth.Principal, array_id: str
) -> list[asyncpg.Record] | None:
    """SPEC Q7: the tasks of the array `array_id` (by task index), if the caller may see them;
    None when no array has this id (then it is a job id or a prefix); 403 like a job's."""
    rows = await pool.fetch(
        f"SELECT {_LIST_COLUMNS} FROM jobs WHERE array_id = $1 ORDER BY array_task", array_id
    )
    if not rows and (whole := await _array_by_prefix(pool, user, array_id)) is not None:
        rows = await pool.fetch(
            f"SELECT {_LIST_COLUMNS} FROM jobs WHERE array_id = $1 ORDER BY array_task", whole
        )
    if not rows:
        return None
    if not can_see(user, rows[0]):  # every task has the array's owner and lab
        raise ApiError(
            403,
            "FORBIDDEN",
            "only the owner, a lab_admin of its lab or an admin may see or cancel this job",
            {"job_id": array_id},
        )
    return rows


async def _array_by_prefix(pool: asyncpg.Pool, user: auth.Principal, prefix: str) -> str | None:
    """U8: the one array whose id starts with `prefix`, when no single job's id does (then it
    is a job's prefix, or ambiguous: load_visible says which); visibility as in _by_prefix."""
    if not prefix or "_" in prefix:
        return None
    like = _like(prefix) + "%"
    seen = 'AND ($2 OR "user" = $3 OR ($4 AND lab = $5))'
    args = (like, user.role == "admin", user.name, user.role == "lab_admin", user.lab)
    found = await pool.fetch(
        f"SELECT DISTINCT array_id FROM jobs WHERE array_id LIKE $1 {seen} LIMIT 2", *args
    )
    singles = await pool.fetchval(
        f"SELECT count(*) FROM jobs WHERE job_id LIKE $1 AND array_id IS NULL {seen}", *args
    )
    if not found and len(prefix) >= MIN_OTHERS_PREFIX:
        found = await pool.fetch(
            "SELECT DISTINCT array_id FROM jobs WHERE array_id LIKE $1 LIMIT 2", like
        )
        singles = await pool.fetchval(
            "SELECT count(*) FROM jobs WHERE job_id LIKE $1 AND array_id IS NULL", like
        )
    return str(found[0]["array_id"]) if len(found) == 1 and not singles else None


def array_out(array_id: str, rows: list[Any]) -> dict[str, Any]:
    """An array as one body (Q7): the request, its tasks and how many are in each state."""
    first = rows[0]
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return {
        "id": array_id,
        "array_id": array_id,
        "name": first["name"],
        "user": first["user"],
        "lab": first["lab"],
        "num_gpus": first["num_gpus"],
        "tasks": [r["job_id"] for r in rows],
        "states": {s: counts[s] for s in in_order(counts)},
        "state": "ARRAY",
        "usage_charged": sum(r["usage_charged"] for r in rows),
        "terminal": all(r["state"] in TERMINAL for r in rows),
    }


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _pattern(given: str) -> tuple[str, int | None]:
    """U8: the LIKE pattern of an id as typed: `P` → `P%`; `P_K` → task K of an array whose id
    starts with P (`P%_K`); anything else is matched as written (and matches nothing)."""
    try:
        ref = jobids.parse(given)
    except ValueError:
        return _like(given) + "%", None
    if ref.tasks is None:
        return _like(ref.prefix) + "%", None
    (task,) = ref.tasks
    return f"{_like(ref.prefix)}%\\_{task}", task


async def _by_prefix(
    pool: asyncpg.Pool, user: auth.Principal, prefix: str
) -> asyncpg.Record | None:
    """The one job whose id starts with `prefix` (or `P_K`: task K of an array starting with
    P, SPEC U8); None if none; 422 if several. Among the jobs the caller may see; a prefix of at
    least MIN_OTHERS_PREFIX characters also finds another's job, which then answers 403 as its
    whole id does (U8), while a shorter one cannot be used to list other labs' ids."""
    if not prefix:
        return None
    pattern, task = _pattern(prefix)
    rows = await pool.fetch(
        f"SELECT {_LIST_COLUMNS}, command, env, sbatch FROM jobs WHERE job_id LIKE $1"
        ' AND ($2 OR "user" = $3 OR ($4 AND lab = $5))'
        " AND ($7::int IS NULL OR array_task = $7)"
        " ORDER BY submitted_at DESC, job_id LIMIT $6",
        pattern,
        user.role == "admin",
        user.name,
        user.role == "lab_admin",
        user.lab,
        PREFIX_CANDIDATES + 1,
        task,
    )
    if not rows and len(prefix.partition("_")[0]) >= MIN_OTHERS_PREFIX:
        rows = await pool.fetch(
            f"SELECT {_LIST_COLUMNS}, command, env, sbatch FROM jobs WHERE job_id LIKE $1"
            " AND ($2::int IS NULL OR array_task = $2) LIMIT 2",
            pattern,
            task,
        )
        return rows[0] if len(rows) == 1 else None  # several: nothing said about them
    if len(rows) <= 1:
        return rows[0] if rows else None
    shown = [r["job_id"] for r in rows[:PREFIX_CANDIDATES]]
    more = " and more" if len(rows) > PREFIX_CANDIDATES else ""
    raise ApiError(
        422,
        "VALIDATION_ERROR",
        f"job_id: {prefix!r} is the start of several jobs ({', '.join(shown)}{more}); "
        "give more of the id",
        {"field": "job_id", "job_id": prefix, "candidates": shown},
    )


def _placement(row: Any) -> dict[str, Any] | None:
    if row["node"] is None:
        return None
    return {"node": row["node"], "tier": row["tier"], "gpus": list(row["gpus"] or [])}


def _reservation(row: Any) -> dict[str, Any] | None:
    if row["reservation_node"] is None:
        return None
    return {
        "node": row["reservation_node"],
        "tier": row["reservation_tier"],
        "gpus": list(row["reservation_gpus"] or []),
        "since": row["reservation_since"],
    }


def job_out(
    row: Any, rank: int | None = None, reason: str | None = None, *, detail: bool = False
) -> dict[str, Any]:
    """The job body. `rank`/`pending_reason` only while queued (D1, D7); placement while it runs
    or after it ran; reservation while one is held (R2)."""
    out: dict[str, Any] = {
        "id": row["job_id"],
        "name": row["name"],
        "user": row["user"],
        "lab": row["lab"],
        "num_gpus": row["num_gpus"],
        "tiers": row["tiers"],
        "min_vram_gb": row["min_vram_gb"],
        "time_limit_s": row["time_limit_s"],
        "state": row["state"],
        "attempt": row["attempt"],
        "submitted_at": row["submitted_at"],
        "queue_entered_at": row["queue_entered_at"],
        "rank": rank,
        "pending_reason": reason,
        "placement": _placement(row),
        "reservation": _reservation(row),
        "dispatched_at": row["dispatched_at"],
        "started_at": row["started_at"],
        "ended_at": row["ended_at"],
        "usage_charged": row["usage_charged"],
        "backend_job_id": row["backend_job_id"],
        "isolation": row["isolation"],
        "exit_code": row["exit_code"],
        "reason": row["end_reason"],
        "oom": row["oom"],
        "kill_failed": row["kill_failed"],
        "cancel_requested_by": row["cancel_requested_by"],
        "chdir": row["chdir"],  # U5: the directory asked for (None: JOB_OUTPUT_DIR)
        "dependency": row.get("dependency"),  # Q8, as recorded (Slurm syntax)
        "held": bool(row.get("held")),  # Q9
        "workspace": row["workspace"],  # X4a: the workspace it runs in (None: the base image)
        "array_id": row["array_id"],  # Q7: the array this job is a task of (None: single)
        "array_task": row["array_task"],
        "array_throttle": row.get("array_throttle"),  # ... its array's %N (None: no cap)
        "terminal": row["state"] in TERMINAL,
    }
    if detail:
        out["command"] = row["command"]
        out["env"] = row["env"]
        sb = row.get("sbatch") or {}  # U6: -o/-e/--open-mode/--signal and the submit's warnings
        out["sbatch"] = {k: v for k, v in sb.items() if k != "warnings"} or None
        out["sbatch_warnings"] = list(sb.get("warnings", []))
    return out


# --- listing with keyset pagination (newest first) ------------------------------------------


def encode_cursor(submitted_at: float, job_id: str) -> str:
    raw = json.dumps([submitted_at, job_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, job_id = json.loads(raw)
        return float(at), str(job_id)
    except (binascii.Error, ValueError, TypeError) as e:
        raise ApiError(422, "VALIDATION_ERROR", "cursor is not valid", {"field": "cursor"}) from e


async def list_jobs(
    pool: asyncpg.Pool,
    user: auth.Principal,
    *,
    states: list[str] | None,
    lab: str | None,
    owner: str | None,
    limit: int,
    cursor: str | None,
    since: float | None = None,
    until: float | None = None,
) -> tuple[list[asyncpg.Record], str | None]:
    """Jobs visible to `user` (own / lab's / all by role), filtered (submitted in
    [since, until) when given), newest first."""
    where: list[str] = []
    args: list[Any] = []

    def add(clause: str, value: Any) -> None:
        args.append(value)
        where.append(clause.replace("?", f"${len(args)}"))

    if user.role == "user":
        add('"user" = ?', user.name)
    elif user.role == "lab_admin":
        add("lab = ?", user.lab)
    if states:
        add("state = ANY(?::text[])", states)
    if lab:
        add("lab = ?", lab)
    if owner:
        add('"user" = ?', owner)
    if since is not None:
        add("submitted_at >= ?", since)
    if until is not None:
        add("submitted_at < ?", until)
    if cursor:
        at, job_id = decode_cursor(cursor)
        args.extend([at, job_id])
        where.append(f"(submitted_at, job_id) < (${len(args) - 1}, ${len(args)})")
    args.append(limit + 1)
    sql = (
        f"SELECT {_LIST_COLUMNS} FROM jobs"
        + (" WHERE " + " AND ".join(where) if where else "")
        + f" ORDER BY submitted_at DESC, job_id DESC LIMIT ${len(args)}"
    )
    rows = await pool.fetch(sql, *args)
    more = len(rows) > limit
    rows = rows[:limit]
    nxt = encode_cursor(rows[-1]["submitted_at"], rows[-1]["job_id"]) if more and rows else None
    return rows, nxt


async def from_log(bus: EventBus, user: auth.Principal, job_id: str, why: str) -> dict[str, Any]:
    """The job folded from its own events in the log (jpu.domain.states.job_view), for when
    the database does not answer (SPEC O5): its state, attempt and placement, marked
    `from_log`. Only a whole id (a prefix needs the projection); the same visibility."""
    view = job_view(await bus.job_events(job_id)) if _whole_id(job_id) else None
    if view is None:
        raise ApiError(
            503,
            "SERVICE_UNAVAILABLE",
            f"the database is unavailable ({why}) and the log has no job {job_id!r} by that"
            " whole id; try again shortly",
            {"dependency": "database", "job_id": job_id},
            headers={"Retry-After": str(RETRY_AFTER_S)},
        )
    if not can_see(user, {"user": view.user, "lab": view.lab}):
        raise ApiError(
            403,
            "FORBIDDEN",
            "only the owner, a lab_admin of its lab or an admin may see or cancel this job",
            {"job_id": job_id},
        )
    node, tier, gpus = view.placement if view.placement is not None else (None, None, ())
    return {
        "id": view.job_id,
        "name": view.name,
        "user": view.user,
        "lab": view.lab,
        "num_gpus": view.num_gpus,
        "state": view.state,
        "attempt": view.attempt,
        "submitted_at": view.submitted_at,
        "queue_entered_at": view.queue_entered_at,
        "dispatched_at": view.dispatched_at,
        "started_at": view.started_at,
        "placement": None if node is None else {"node": node, "tier": tier, "gpus": list(gpus)},
        "backend_job_id": view.backend_job_id,
        "from_log": True,
        "degraded": f"the database is unavailable ({why}): the job as its events in the log"
        " say; rank, usage and attempts come back with the database",
    }


def _whole_id(text: str) -> bool:
    """`ID` or `ID_K` as jpu.domain.jobids reads it (no wildcard reaches a subject filter)."""
    try:
        jobids.parse(text)
    except ValueError:
        return False
    return True
