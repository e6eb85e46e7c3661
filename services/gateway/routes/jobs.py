"""Jobs (SPEC §8): submit, list, show, events (the audit trail), cancel.

Submit and cancel are commands: the gateway checks who is asking and the request's shape, then
intake decides and appends the event (SPEC E4); the verdicts (422 / 503 / 409) are intake's.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final

import msgspec
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse

from jpu import commands
from jpu_services.gateway.deps import CurrentUser, EdgesDep, PoolDep, SettingsDep
from jpu_services.gateway.errors import ApiError
from jpu_services.gateway.ratelimit import RateLimiter, from_settings, retry_after_header
from jpu_services.gateway.routes import _commands as cmd
from jpu_services.gateway.routes._jobview import job_out, list_jobs, load_visible
from jpu_services.gateway.routes._queueview import shared_view

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

MAX_IDEMPOTENCY_KEY: Final = 200
_SUBMIT_SCHEMA: Final = {
    "type": "object",
    "required": ["command", "num_gpus"],
    "properties": {
        "name": {"type": "string", "maxLength": 128, "pattern": "^[A-Za-z0-9._-]+$"},
        "command": {"type": "string", "maxLength": 65536, "description": "shell script text"},
        "num_gpus": {"type": "integer", "minimum": 1, "maximum": 8},
        "tiers": {"type": "array", "items": {"type": "string"}},
        "min_vram_gb": {"type": "integer", "minimum": 1},
        "time_limit_s": {"type": "integer", "minimum": 1},
        "env": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 64},
    },
}
_ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    401: {"description": "UNAUTHENTICATED"},
    403: {"description": "FORBIDDEN"},
    404: {"description": "NOT_FOUND"},
    409: {"description": "ALREADY_TERMINAL / IDEMPOTENCY_CONFLICT"},
    422: {"description": "VALIDATION_ERROR / NO_FIT_PLACEMENT"},
    429: {"description": "RATE_LIMITED"},
    503: {"description": "SERVICE_MAINTENANCE"},
}


def _limiter(request: Request) -> RateLimiter:
    limiter = getattr(request.app.state, "submit_limiter", None)
    if limiter is None:
        limiter = request.app.state.submit_limiter = from_settings(request.app.state.settings.base)
    assert isinstance(limiter, RateLimiter)
    return limiter


async def _json_object(request: Request) -> dict[str, Any]:
    """Shape only: a JSON object of sane size. Field rules (Q1) are intake's."""
    raw = await request.body()
    if len(raw) > cmd.MAX_BODY_BYTES:
        raise cmd.shape_error("body", f"request body over {cmd.MAX_BODY_BYTES} bytes")
    try:
        body = json.loads(raw or b"null")
    except ValueError as e:
        raise cmd.shape_error("body", f"body is not valid JSON: {e}") from e
    if not isinstance(body, dict):
        raise cmd.shape_error("body", "body must be a JSON object")
    return body


async def _job_body(
    request: Request, pool: Any, settings: Any, row: Any, *, detail: bool = True
) -> dict[str, Any]:
    rank = reason = None
    if row["state"] in ("PERSONAL_QUEUE_WAIT", "GLOBAL_QUEUE_WAIT", "RESERVING"):
        view = await shared_view(request).get()  # read after this request's write (see there)
        rank, reason = view.rank_of(row["job_id"])
        if row["state"] == "PERSONAL_QUEUE_WAIT":  # the view was read after the row: it may
            rank, reason = None, "ConcurrencyLimit"  # already be promoted; show the row's state
    return job_out(row, rank, reason, detail=detail)


def _submitted_body(row: Any) -> dict[str, Any]:
    """The job as just submitted: its state, not its rank. SPEC §8 gives rank and pending reason
    on GET /v1/jobs/{id}; a rank here would cost a whole dispatch cycle per submit, and a job no
    cycle has seen yet has no D7 reason but its personal queue's (D7 ConcurrencyLimit)."""
    reason = "ConcurrencyLimit" if row["state"] == "PERSONAL_QUEUE_WAIT" else None
    return job_out(row, None, reason, detail=True)


@router.post(
    "",
    status_code=201,
    responses=_ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _SUBMIT_SCHEMA}},
        }
    },
)
async def submit(
    request: Request,
    user: CurrentUser,
    edges: EdgesDep,
    settings: SettingsDep,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> JSONResponse:
    """Submit a job (SPEC §2). 201 with the job; 200 when `Idempotency-Key` replays (Q6)."""
    wait = _limiter(request).take(user.name)
    if wait > 0:
        raise ApiError(
            429,
            "RATE_LIMITED",
            "too many submissions; slow down",
            {"retry_after_s": round(wait, 3)},
            headers={"Retry-After": retry_after_header(wait)},
        )
    if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
        raise cmd.shape_error("Idempotency-Key", f"1–{MAX_IDEMPOTENCY_KEY} characters")
    body = await _json_object(request)
    reply = await cmd.send(
        edges,
        commands.submit_subject(settings.base.subject_prefix),
        commands.SubmitCommand(
            user=user.name,
            lab=user.lab,
            body=body,
            idempotency_key=idempotency_key,
            max_active_jobs=user.max_active_jobs,
        ),
    )
    status = 200 if reply.replayed else 201
    headers = {"Location": f"/v1/jobs/{reply.job_id}"}
    if await cmd.caught_up(edges, reply.seq, request=request):
        row = await load_visible(edges.pool, user, str(reply.job_id))
        out = _submitted_body(row)
    else:  # the projection lags: answer with what intake told us (the GET will catch up)
        out = {"id": reply.job_id, "state": reply.state, "projection_lag": True}
    return JSONResponse(out, status_code=status, headers=headers)


@router.get("", responses=_ERRORS)
async def list_(
    user: CurrentUser,
    pool: PoolDep,
    state: Annotated[str | None, Query(description="state or comma-separated states")] = None,
    lab: str | None = None,
    user_: Annotated[str | None, Query(alias="user")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: str | None = None,
) -> dict[str, Any]:
    """Jobs visible to the caller (own; lab_admin: the lab's; admin: all), newest first."""
    states = [s.strip().upper() for s in state.split(",") if s.strip()] if state else None
    rows, nxt = await list_jobs(
        pool, user, states=states, lab=lab, owner=user_, limit=limit, cursor=cursor
    )
    return {"jobs": [job_out(r) for r in rows], "next_cursor": nxt}


@router.get("/{job_id}", responses=_ERRORS)
async def show(
    request: Request, job_id: str, user: CurrentUser, pool: PoolDep, settings: SettingsDep
) -> dict[str, Any]:
    """The job: state, attempt, rank and pending reason if queued, placement, reservation,
    usage charged, backend (Slurm) job id, isolation."""
    row = await load_visible(pool, user, job_id)
    return await _job_body(request, pool, settings, row)


@router.get("/{job_id}/events", responses=_ERRORS)
async def events(job_id: str, user: CurrentUser, edges: EdgesDep) -> dict[str, Any]:
    """The job's events from the log, in stream order (the audit trail, SPEC E2)."""
    await load_visible(edges.pool, user, job_id)
    delivered = await edges.bus.job_events(job_id)
    return {
        "job_id": job_id,
        "events": [{"seq": d.seq, **msgspec.to_builtins(d.event)} for d in delivered],
    }


@router.post("/{job_id}/cancel", status_code=202, responses=_ERRORS)
async def cancel(
    request: Request, job_id: str, user: CurrentUser, edges: EdgesDep, settings: SettingsDep
) -> JSONResponse:
    """Cancel (SPEC X5): 202 and the job; again → 202 (idempotent); ended → 409 ALREADY_TERMINAL.
    Allowed in every maintenance state (M1)."""
    await load_visible(edges.pool, user, job_id)  # 404 / 403 before bothering intake
    reply = await cmd.send(
        edges,
        commands.cancel_subject(settings.base.subject_prefix),
        commands.CancelCommand(job_id=job_id, by=user.name, role=user.role, lab=user.lab),
    )
    await cmd.caught_up(edges, reply.seq, request=request)
    row = await load_visible(edges.pool, user, job_id)
    return JSONResponse(await _job_body(request, edges.pool, settings, row), status_code=202)
