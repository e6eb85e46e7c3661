"""Maintenance status, anonymous and always available (SPEC M5)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel

from jpu_services.gateway.deps import PoolDep

router = APIRouter(prefix="/v1/maintenance", tags=["maintenance"])


class MaintenanceStatus(BaseModel):
    state: Literal["NORMAL", "DRAINING", "BACKFILL_RECOVERY", "ACTIVE"]
    since: float | None  # None: never in maintenance since the log began
    message: str


@router.get("/status")
async def status(pool: PoolDep) -> MaintenanceStatus:
    row = await pool.fetchrow("SELECT state, since, message FROM maintenance WHERE id = 1")
    if row is None:  # no MaintenanceChanged in the log yet
        return MaintenanceStatus(state="NORMAL", since=None, message="")
    return MaintenanceStatus(state=row["state"], since=row["since"], message=row["message"])
