"""The GPU pool by placement (SPEC §8 `GET /v1/placements`, P1, P2) and live LLM backfill (§6).

Placements are computed, never stored (P1): `gpu_resources GROUP BY (node, tier)` through the
policy core's own `placements()`, so capacity and idle here are exactly what the dispatcher uses.
"""

from __future__ import annotations

from typing import Any

import asyncpg
from fastapi import APIRouter

from jpu.policy.model import Gpu
from jpu.policy.placements import placements as compute_placements
from jpu.store.projections.backfill_instances import live_instances
from jpu_services.gateway.deps import CurrentUser, PoolDep, SettingsDep
from jpu_services.gateway.errors import responses

router = APIRouter(prefix="/v1", tags=["pool"])


async def _gpus(pool: asyncpg.Pool) -> list[Gpu]:
    rows = await pool.fetch(
        "SELECT node, tier, index, state FROM gpu_resources ORDER BY node, tier, index"
    )
    return [Gpu(r["node"], r["tier"], r["index"], r["state"]) for r in rows]


def _holders(gpus: list[Gpu], kind: str) -> list[dict[str, Any]]:
    held: dict[str, list[int]] = {}
    for g in gpus:
        k, _, ref = g.state.partition(":")
        if k == kind:
            held.setdefault(ref, []).append(g.index)
    return [{"job_id": j, "gpus": sorted(ix)} for j, ix in held.items()]


@router.get("/placements", responses=responses(401))
async def placements(_: CurrentUser, pool: PoolDep, settings: SettingsDep) -> dict[str, Any]:
    """Per placement: node, tier, capacity, idle, reserved (by which job), backfilled, running
    jobs, and each GPU's state (free | job:<id> | reserved:<id> | backfill:<id> | down)."""
    gpus = await _gpus(pool)
    tiers = {t.name: t for t in settings.base.tiers}
    by_key: dict[tuple[str, str], list[Gpu]] = {}
    for g in gpus:
        by_key.setdefault((g.node, g.tier), []).append(g)
    out = []
    for p in compute_placements(gpus, tiers):
        mine = by_key[(p.node, p.tier)]
        tier = tiers[p.tier]
        out.append(
            {
                "node": p.node,
                "tier": p.tier,
                "active": tier.active,
                "max_gpus": tier.max_gpus,
                "capacity": p.capacity,
                "idle": p.idle_count,
                "idle_gpus": list(p.idle),
                "down": sum(g.state == "down" for g in mine),
                "reserved": [{"job_id": j, "gpus": list(ix)} for j, ix in p.reserved_by.items()],
                "backfilled": [{"backfill_id": b, "gpu": i} for i, b in sorted(p.backfill.items())],
                "running": _holders(mine, "job"),
                "gpus": [{"index": g.index, "state": g.state} for g in mine],
            }
        )
    unknown = sorted({g.tier for g in gpus} - set(tiers))  # GPUs of tiers not configured
    return {"placements": out, "unconfigured_tiers": unknown}


@router.get("/backfill", responses=responses(401))
async def backfill(_: CurrentUser, pool: PoolDep) -> dict[str, Any]:
    """LLM inference running on idle GPUs now (B1), from the `backfill` projection: each live
    instance with its endpoint, backend job and its GPU's state now (a reserved GPU keeps its
    instance until the dispatch, R2/B4)."""
    return {"backfill": await live_instances(pool)}
