"""Explanations from the log (SPEC U4, §8 `GET /v1/jobs/{id}/wait`).

* `GET /v1/jobs/{id}/wait` — why the job waited: rank and pending reason over its wait, the labs
  ahead with their decayed usage, its reservations and what ended them (R3: the event whose
  charge reordered the queue), time per phase. Same access as the job (owner, lab_admin of the
  lab, admin: 403/404 as `GET /v1/jobs/{id}`). A finished job's answer never changes (S2): it is
  cached.
* `GET /v1/labs/{lab}/usage/explain` — every charge that makes up the lab's usage (F5), for the
  lab's members and admins; `GET /v1/admin/labs/{lab}/usage-explain` — the same, admins only.
* `GET /v1/admin/usage-statement` — per lab and period, like `sreport`.
* `GET /v1/queue?at=TIME` (jpu_services.gateway.routes.queue) answers with `past_queue` here.

The answers are jpu.explain's pure folds of the log with the services' own fold and cycle; the
usage ones read that fold's lines from the `usage_ledger` projection (an index, not the log).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Annotated, Any, Final

import msgspec
from fastapi import APIRouter, Query, Request

from jpu.bus import history
from jpu.config import Config
from jpu.explain.queue_at import PastQueue
from jpu.explain.usage import UsageExplanation, UsageStatement, explain_usage
from jpu.explain.usage import usage_statement as statement
from jpu.explain.wait import JobNotInLog, WaitTimeline
from jpu.runtime.edges import Edges
from jpu.store.projections.usage_ledger import read_ledger
from jpu_services.gateway.deps import CurrentUser, EdgesDep, SettingsDep
from jpu_services.gateway.errors import ApiError, forbidden, responses
from jpu_services.gateway.routes._commands import now
from jpu_services.gateway.routes._jobview import load_visible

router = APIRouter(prefix="/v1", tags=["explain"])

_CACHE_SIZE: Final = 512  # finished jobs' answers kept (each a few kB)
_REF: Final = "#/components/schemas/{name}"
MODELS: Final = (WaitTimeline, UsageExplanation, UsageStatement, PastQueue)


def components() -> dict[str, Any]:
    """The OpenAPI schemas of the answers (jpu_services.gateway.openapi adds them)."""
    _, defs = msgspec.json.schema_components(MODELS, ref_template=_REF)
    return defs


def _ok(model: type, description: str) -> dict[int | str, dict[str, Any]]:
    schema = {"$ref": _REF.format(name=model.__name__)}
    return {200: {"description": description, "content": {"application/json": {"schema": schema}}}}


def _cache(request: Request) -> OrderedDict[str, dict[str, Any]]:
    cache: OrderedDict[str, dict[str, Any]] = request.app.state.wait_cache
    return cache


@router.get(
    "/jobs/{job_id}/wait",
    response_model=None,  # the schema is jpu.explain's model (components())
    responses={**_ok(WaitTimeline, "the job's wait, from the log"), **responses(401, 403, 404)},
)
async def wait(
    request: Request, job_id: str, user: CurrentUser, edges: EdgesDep, settings: SettingsDep
) -> dict[str, Any]:
    """Why the job waited (U4): each change of its rank and pending reason (D1, D7) with the
    event that caused it and the labs ahead (decayed usage, F3); its reservations and why each
    ended (R3: the charge that reordered the queue, and who ranked first then); seconds per
    phase (personal queue, global queue, reserving, starting, running)."""
    job_id = (await load_visible(edges.pool, user, job_id))["job_id"]  # 404 / 403, a prefix
    cache = _cache(request)
    hit = cache.get(job_id)
    if hit is not None:
        cache.move_to_end(job_id)
        return hit
    try:
        timeline = await history.read_wait(edges.bus, settings.base, job_id, now(request))
    except JobNotInLog as e:
        raise ApiError(
            404, "NOT_FOUND", f"job {job_id!r} is not in the log", {"job_id": job_id}
        ) from e
    out: dict[str, Any] = msgspec.to_builtins(timeline)
    if timeline.final:  # S2: it never changes again
        cache[job_id] = out
        while len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)
    return out


# --- admin: usage explained, statement, past queue -------------------------------------------


def _admin(user: Any, what: str) -> None:
    if not user.is_admin:
        raise forbidden(f"only an admin may see {what}")


def _period(since: float | None, until: float | None) -> None:
    if since is not None and until is not None and until <= since:
        raise ApiError(
            422,
            "VALIDATION_ERROR",
            "until: must be after since",
            {"field": "until", "since": since, "until": until},
        )


Since = Annotated[
    float | None, Query(allow_inf_nan=False, description="charges at or after (epoch seconds)")
]
Until = Annotated[
    float | None, Query(allow_inf_nan=False, description="charges before (epoch seconds)")
]


_EXPLAIN_DOC = """Every charge (`UsageCharged`) of the lab in [since, until): job, attempt, user,
run or reservation (R3 at release, or with the run, R4), GPU-seconds and tier TFLOPS it paid
for, the decay applied since (F3) and what it contributes now. `usage` is `GET /v1/labs/{lab}`'s
and equals `total_value`, the sum over every charge of the lab (F5)."""


async def _explained(
    request: Request,
    lab: str,
    edges: Edges,
    config: Config,
    since: float | None,
    until: float | None,
) -> dict[str, Any]:
    """The one answer both routes give: jpu.explain.usage over the usage_ledger's lines."""
    _period(since, until)
    book = await read_ledger(edges.pool, lab=lab)  # every charge of the lab: F5's total
    x = explain_usage(book, lab, now(request), config.half_life_s, since=since, until=until)
    return msgspec.to_builtins(x)


@router.get(
    "/labs/{lab}/usage/explain",
    response_model=None,
    responses={
        **_ok(UsageExplanation, "the lab's charges"),
        **responses(401, 403, s403="FORBIDDEN (not a member of the lab, nor an admin)"),
    },
    description=_EXPLAIN_DOC + " For the lab's members (users, lab_admins) and admins.",
)
async def lab_usage_explain(
    request: Request,
    lab: str,
    user: CurrentUser,
    edges: EdgesDep,
    settings: SettingsDep,
    since: Since = None,
    until: Until = None,
) -> dict[str, Any]:
    if not user.may_see_lab(lab):
        raise ApiError(
            403,
            "FORBIDDEN",
            f"only members of {lab} and admins may see its charges (yours: {user.lab})",
            {"lab": lab, "your_lab": user.lab},
        )
    return await _explained(request, lab, edges, settings.base, since, until)


@router.get(
    "/admin/labs/{lab}/usage-explain",
    response_model=None,
    responses={
        **_ok(UsageExplanation, "the lab's charges"),
        **responses(401, 403, s403="FORBIDDEN (admins only)"),
    },
    description=_EXPLAIN_DOC,
)
async def usage_explain(
    request: Request,
    lab: str,
    user: CurrentUser,
    edges: EdgesDep,
    settings: SettingsDep,
    since: Since = None,
    until: Until = None,
) -> dict[str, Any]:
    _admin(user, "a lab's charges")
    return await _explained(request, lab, edges, settings.base, since, until)


@router.get(
    "/admin/usage-statement",
    response_model=None,
    responses={
        **_ok(UsageStatement, "usage per lab in the period"),
        **responses(401, 403, s403="FORBIDDEN (admins only)"),
    },
)
async def usage_statement(
    request: Request, user: CurrentUser, edges: EdgesDep, since: Since = None, until: Until = None
) -> dict[str, Any]:
    """Per lab in [since, until) (by each charge's time): TFLOP-s charged, GPU-hours by tier
    (reservations included, R3/R4), jobs and attempts charged, share of all labs' TFLOP-s."""
    _admin(user, "the usage statement")
    _period(since, until)
    book = await read_ledger(edges.pool, since=since, until=until)
    return msgspec.to_builtins(statement(book, since=since, until=until))


async def past_queue(
    request: Request, user: Any, edges: Edges, config: Config, at: float
) -> dict[str, Any]:
    """`GET /v1/queue?at=TIME`: the queue as it stood then, from the log (admins only)."""
    _admin(user, "the queue at a past moment")
    if at > now(request):
        raise ApiError(
            422, "VALIDATION_ERROR", "at: must not be in the future", {"field": "at", "at": at}
        )
    past = await history.read_queue_at(edges.bus, config, at)
    return msgspec.to_builtins(past)
