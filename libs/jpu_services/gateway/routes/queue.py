"""The global queue in current order (SPEC §8 `GET /v1/queue`, D1, D7) and the jobs running now.
Commands are hidden."""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Request

from jpu.domain.states import STATE_LIST_PATTERN, STATES
from jpu_services.gateway.deps import CurrentUser, EdgesDep, PoolDep, SettingsDep
from jpu_services.gateway.errors import ApiError, responses
from jpu_services.gateway.personal import personal_reasons
from jpu_services.gateway.routes import _commands as cmd
from jpu_services.gateway.routes import explain
from jpu_services.gateway.routes._accrued import lab_accrued
from jpu_services.gateway.routes._jobview import RUNNING_STATES
from jpu_services.gateway.routes._queueview import shared_view

router = APIRouter(prefix="/v1", tags=["queue"])


def _entry(
    row: Any, rank: int | None, reason: str | None, usage: float, accrued: float
) -> dict[str, Any]:
    reservation = None
    if row["reservation_node"] is not None:
        reservation = {
            "node": row["reservation_node"],
            "tier": row["reservation_tier"],
            "gpus": list(row["reservation_gpus"] or []),
            "since": row["reservation_since"],
        }
    return {
        "rank": rank,
        "job_id": row["job_id"],
        "name": row["name"],
        "lab": row["lab"],
        "user": row["user"],
        "num_gpus": row["num_gpus"],
        "tiers": row["tiers"],
        "min_vram_gb": row["min_vram_gb"],  # D7 MinVram: the floor it waits for (X8 raises it)
        "state": row["state"],
        "attempt": row["attempt"],
        "time_limit_s": row["time_limit_s"],  # squeue's TIME_LIMIT (%l)
        "lab_usage": usage,  # D1: charged, decayed — what orders the queue
        "lab_accrued_uncharged": accrued,  # F4: the lab's jobs in flight so far, not in the order
        "queue_entered_at": row["queue_entered_at"],
        "submitted_at": row["submitted_at"],
        "pending_reason": reason,
        "reservation": reservation,
        "array_throttle": row["array_throttle"],  # Q7: its array's %N (None: no cap)
    }


_RUNNING_SQL: Final = (
    'SELECT job_id, lab, "user", name, num_gpus, tiers, state, attempt, node, tier, gpus, '
    "dispatched_at, started_at, time_limit_s, submitted_at FROM jobs "
    "WHERE state = ANY($1::text[]) ORDER BY dispatched_at NULLS LAST, submitted_at, job_id"
)
# Every state a job can be in (S1, S2); a filter naming another one is a typo, not "none".
JOB_STATES: Final = STATES


def _running(row: Any, usage: float, accrued: float, now: float) -> dict[str, Any]:
    started = row["started_at"]
    return {
        "rank": None,
        "job_id": row["job_id"],
        "name": row["name"],
        "lab": row["lab"],
        "user": row["user"],
        "num_gpus": row["num_gpus"],
        "tiers": row["tiers"],
        "state": row["state"],
        "attempt": row["attempt"],
        "lab_usage": usage,
        "lab_accrued_uncharged": accrued,
        "placement": (
            None
            if row["node"] is None
            else {"node": row["node"], "tier": row["tier"], "gpus": list(row["gpus"] or [])}
        ),
        "dispatched_at": row["dispatched_at"],
        "started_at": started,
        "elapsed_s": None if started is None else max(0.0, now - started),  # squeue's TIME
        "time_limit_s": row["time_limit_s"],
        "submitted_at": row["submitted_at"],
    }


def _states(state: str | None) -> set[str] | None:
    """STATE_LIST_PATTERN, as the schema says: exact names, no blanks, no spaces."""
    if not state:
        return None
    states = set(state.split(","))
    unknown = sorted(states - set(JOB_STATES))
    if unknown:
        raise ApiError(
            422,
            "VALIDATION_ERROR",
            f"state: unknown state(s) {', '.join(unknown)} (known: {', '.join(JOB_STATES)})",
            {"field": "state", "known": list(JOB_STATES)},
        )
    return states


def _kept(e: dict[str, Any], user: str | None, lab: str | None, states: set[str] | None) -> bool:
    return (
        (user is None or e["user"] == user)
        and (lab is None or e["lab"] == lab)
        and (states is None or e["state"] in states)
    )


@router.get("/queue", responses=responses(401, 403, s403="FORBIDDEN (`at`: admins only)"))
async def queue(
    request: Request,
    caller: CurrentUser,
    pool: PoolDep,
    edges: EdgesDep,
    settings: SettingsDep,
    user: Annotated[str | None, Query(description="only this user's jobs")] = None,
    lab: Annotated[str | None, Query(description="only this lab's jobs")] = None,
    state: Annotated[
        str | None,
        Query(
            description=f"a state or comma-separated states, of {', '.join(JOB_STATES)}",
            json_schema_extra={"pattern": STATE_LIST_PATTERN},
        ),
    ] = None,
    at: Annotated[
        float | None,
        Query(
            allow_inf_nan=False,
            description="admins: the queue as it stood at this time (epoch seconds), from the log",
        ),
    ] = None,
) -> dict[str, Any]:
    """Every user sees the whole queue (fair-share is public); `queue` lists the global queue
    by rank (1 first), then the personal queues (Q4: rank null; reason ConcurrencyLimit, or
    Held / Dependency (Q8, Q9), or ArrayThrottle for a task its array's %N holds back, Q7), each
    with its `estimated_start`, `estimate_basis` and `estimated_at` (U4; see README);
    `running` the jobs holding GPUs (DISPATCHED, RUNNING, CANCELLING), like squeue. Filters
    keep the ranks of the whole queue; the lengths count it whole. With `at` (admins): the
    queue, personal queues and running jobs as they stood then, folded from the log with the
    dispatcher's cycle run at that time (SPEC U4)."""
    states = _states(state)
    if at is not None:
        past = await explain.past_queue(request, caller, edges, settings.base, at)
        past["queue"] = [e for e in past["queue"] if _kept(e, user, lab, states)]
        past["running"] = [e for e in past["running"] if _kept(e, user, lab, states)]
        return past
    view = await shared_view(request).get()
    running_rows = await pool.fetch(_RUNNING_SQL, list(RUNNING_STATES))
    tiers = {t.name: t for t in settings.base.tiers}
    accrued = lab_accrued([*view.ordered, *running_rows], tiers, view.now)

    def usage(lab: str) -> tuple[float, float]:
        return view.usage.get(lab, 0.0), accrued.get(lab, 0.0)

    entries = [
        _entry(r, view.rank(i), view.reasons.get(r["job_id"]), *usage(r["lab"]))
        for i, r in enumerate(view.ordered)
    ]
    personal = await personal_reasons(request).reasons(pool, (r["job_id"] for r in view.personal))
    entries += [  # Q4: no rank; D7 the domain's (Q5, Q7, Q8, Q9)
        _entry(r, None, personal.get(r["job_id"]), *usage(r["lab"])) for r in view.personal
    ]
    answered = max(view.now, cmd.now(request))  # no estimate before this answer's time
    for e in entries:  # U4: the dispatcher's forward estimate — an estimate, not a promise
        e.update(view.estimate_of(e["job_id"], answered))
    running = [_running(r, *usage(r["lab"]), view.now) for r in running_rows]

    def keep(e: dict[str, Any]) -> bool:
        return _kept(e, user, lab, states)

    return {
        "as_of": view.now,
        # D1/D7: ranks and reasons are the dispatcher's, from its cycle at this time (null
        # before its first cycle); a job that entered the queue since has none yet
        "decided_at": view.decided_at,
        "maintenance": view.maintenance,
        "half_life_s": settings.base.half_life_s,
        "global_length": len(view.ordered),
        "personal_length": len(view.personal),
        "running_length": len(running),
        "queue": [e for e in entries if keep(e)],
        "running": [e for e in running if keep(e)],
    }
