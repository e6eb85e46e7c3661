"""Labs and their fair-share usage (SPEC §8 `GET /v1/labs`, F3, F6) and its history (U2 chart)."""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Query, Request

from jpu.policy.fairshare import decayed
from jpu.policy.model import LabUsage
from jpu_services.gateway.deps import CurrentUser, PoolDep, SettingsDep
from jpu_services.gateway.errors import ApiError, responses
from jpu_services.gateway.routes._commands import now

router = APIRouter(prefix="/v1", tags=["labs"])

_COUNTS = """SELECT lab,
    count(*) FILTER (WHERE state IN ('DISPATCHED', 'RUNNING', 'CANCELLING')) AS running,
    count(*) FILTER (WHERE state IN ('GLOBAL_QUEUE_WAIT', 'RESERVING')) AS queued,
    count(*) FILTER (WHERE state = 'RESERVING') AS reserving,
    count(*) FILTER (WHERE state = 'PERSONAL_QUEUE_WAIT') AS personal_queue
  FROM jobs WHERE state NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') GROUP BY lab"""


async def _labs(
    pool: asyncpg.Pool, config_labs: list[str], t: float, half_life_s: float
) -> list[dict[str, Any]]:
    """Every lab known anywhere: the auth tables, the configuration, usage, jobs (F6: 0)."""
    usage = {r["lab"]: r for r in await pool.fetch("SELECT lab, value, as_of FROM lab_usage")}
    counts = {r["lab"]: r for r in await pool.fetch(_COUNTS)}
    names = {r["name"] for r in await pool.fetch("SELECT name FROM labs")}
    names |= set(config_labs) | set(usage) | set(counts)
    out = []
    for lab in sorted(names):
        u, c = usage.get(lab), counts.get(lab)
        stored = LabUsage(u["value"], u["as_of"]) if u else LabUsage()
        out.append(
            {
                "lab": lab,
                "usage": decayed(stored, t, half_life_s),
                "raw_value": stored.value,
                "as_of": stored.as_of if u else None,
                **{
                    k: int(c[k]) if c else 0
                    for k in ("running", "queued", "reserving", "personal_queue")
                },
            }
        )
    return out


@router.get("/labs", responses=responses(401))
async def labs(
    request: Request, _: CurrentUser, pool: PoolDep, settings: SettingsDep
) -> dict[str, Any]:
    """Per lab: decayed usage now (TFLOP-s), the stored (raw_value, as_of), job counts."""
    t = now(request)
    base = settings.base
    rows = await _labs(pool, [lab.name for lab in base.labs], t, base.half_life_s)
    return {"as_of": t, "half_life_s": base.half_life_s, "labs": rows}


@router.get("/labs/{lab}", responses=responses(401, 404))
async def lab(
    request: Request, lab: str, _: CurrentUser, pool: PoolDep, settings: SettingsDep
) -> dict[str, Any]:
    base = settings.base
    for row in await _labs(pool, [x.name for x in base.labs], now(request), base.half_life_s):
        if row["lab"] == lab:
            return {**row, "half_life_s": base.half_life_s}
    raise ApiError(404, "NOT_FOUND", f"no lab {lab!r}", {"lab": lab})


def _sampled(
    points: list[tuple[float, float]], start: float, end: float, n: int, half_life_s: float
) -> list[list[float]]:
    """The decayed curve of one lab at `n` instants plus each charge (a step up, then decay)."""
    ts = sorted(
        {start + (end - start) * i / max(n - 1, 1) for i in range(n)}
        | {p[0] for p in points if start <= p[0] <= end}
    )
    out, k, last = [], 0, LabUsage()
    for t in ts:
        while k < len(points) and points[k][0] <= t:
            last = LabUsage(points[k][1], points[k][0])
            k += 1
        out.append([t, decayed(last, t, half_life_s)])
    return out


@router.get("/usage/history", responses=responses(401))
async def usage_history(
    request: Request,
    _: CurrentUser,
    pool: PoolDep,
    settings: SettingsDep,
    hours: Annotated[float, Query(gt=0, le=24 * 365)] = 168.0,
    points: Annotated[int, Query(ge=2, le=1000)] = 120,
) -> dict[str, Any]:
    """Lab usage over time for the console's chart (U2): per lab `[t, decayed usage]` pairs."""
    end = now(request)
    start = end - hours * 3600
    rows = await pool.fetch("SELECT lab, as_of, value FROM usage_history ORDER BY as_of, seq")
    by_lab: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        by_lab.setdefault(r["lab"], []).append((r["as_of"], r["value"]))
    hl = settings.base.half_life_s
    return {
        "start": start,
        "end": end,
        "half_life_s": hl,
        "series": {lab: _sampled(p, start, end, points, hl) for lab, p in by_lab.items()},
    }
