"""The global queue in current order (SPEC §8 `GET /v1/queue`, D1, D7). Commands are hidden."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from jpu_services.gateway.deps import CurrentUser, PoolDep, SettingsDep
from jpu_services.gateway.routes._queueview import shared_view

router = APIRouter(prefix="/v1", tags=["queue"])


def _entry(row: Any, rank: int | None, reason: str | None, usage: float) -> dict[str, Any]:
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
        "state": row["state"],
        "attempt": row["attempt"],
        "lab_usage": usage,
        "queue_entered_at": row["queue_entered_at"],
        "submitted_at": row["submitted_at"],
        "pending_reason": reason,
        "reservation": reservation,
    }


@router.get("/queue")
async def queue(
    request: Request, _: CurrentUser, pool: PoolDep, settings: SettingsDep
) -> dict[str, Any]:
    """Every user sees the whole queue (fair-share is public); `queue` lists the global queue
    by rank (1 first), then the personal queues (Q4: rank null, reason ConcurrencyLimit)."""
    view = await shared_view(request).get()
    entries = [
        _entry(r, i, view.reasons.get(r["job_id"]), view.usage.get(r["lab"], 0.0))
        for i, r in enumerate(view.ordered, start=1)
    ] + [_entry(r, None, "ConcurrencyLimit", view.usage.get(r["lab"], 0.0)) for r in view.personal]
    return {
        "as_of": view.now,
        "maintenance": view.maintenance,
        "half_life_s": settings.base.half_life_s,
        "global_length": len(view.ordered),
        "personal_length": len(view.personal),
        "queue": entries,
    }
