"""Labs and their fair-share usage (SPEC §8 `GET /v1/labs`, F3, F6) and its history (U2 chart)."""

from __future__ import annotations

from typing import Annotated, Any

import asyncpg
from fastapi import APIRouter, Query, Request

from jpu.config import Config
from jpu.domain.states import PLACED
from jpu.policy.fairshare import decayed
from jpu.policy.model import LabUsage
from jpu_services.gateway.deps import CurrentUser, PoolDep, SettingsDep
from jpu_services.gateway.errors import ApiError, responses
from jpu_services.gateway.routes._accrued import HOLDING_COLUMNS, lab_accrued
from jpu_services.gateway.routes._commands import now

router = APIRouter(prefix="/v1", tags=["labs"])

_COUNTS = """SELECT lab,
    count(*) FILTER (WHERE state IN ('DISPATCHED', 'RUNNING', 'CANCELLING')) AS running,
    count(*) FILTER (WHERE state IN ('GLOBAL_QUEUE_WAIT', 'RESERVING')) AS queued,
    count(*) FILTER (WHERE state = 'RESERVING') AS reserving,
    count(*) FILTER (WHERE state = 'PERSONAL_QUEUE_WAIT') AS personal_queue
  FROM jobs WHERE state NOT IN ('COMPLETED', 'FAILED', 'CANCELLED') GROUP BY lab"""


_HOLDING = f"SELECT {HOLDING_COLUMNS} FROM jobs WHERE state = ANY($1::text[])"


async def _labs(pool: asyncpg.Pool, base: Config, t: float) -> list[dict[str, Any]]:
    """Every lab known anywhere: the auth tables, the configuration, usage, jobs (F6: 0)."""
    config_labs, half_life_s = [lab.name for lab in base.labs], base.half_life_s
    usage = {r["lab"]: r for r in await pool.fetch("SELECT lab, value, as_of FROM lab_usage")}
    counts = {r["lab"]: r for r in await pool.fetch(_COUNTS)}
    holding = await pool.fetch(_HOLDING, [*PLACED, "RESERVING"])
    accrued = lab_accrued(holding, {tier.name: tier for tier in base.tiers}, t)
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
                # F4: what its running jobs and reservations cost so far, charged when they
                # end; not part of `usage` (which orders the queue, D1)
                "accrued_uncharged": accrued.get(lab, 0.0),
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
    """Per lab: decayed usage now (TFLOP-s; the charged usage that orders the queue), the stored
    (raw_value, as_of), `accrued_uncharged` (what its running jobs and reservations have cost so
    far, charged when they end — F4) and job counts."""
    t = now(request)
    base = settings.base
    rows = await _labs(pool, base, t)
    return {"as_of": t, "half_life_s": base.half_life_s, "labs": rows}


@router.get("/labs/{lab}", responses=responses(401, 404))
async def lab(
    request: Request, lab: str, _: CurrentUser, pool: PoolDep, settings: SettingsDep
) -> dict[str, Any]:
    base = settings.base
    for row in await _labs(pool, base, now(request)):
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
