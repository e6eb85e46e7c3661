"""Maintenance status, anonymous and always available (SPEC M5).

Read from the maintenance projection; while PostgreSQL does not answer, from the log itself —
the last MaintenanceChanged on its one subject (one JetStream request), which is what the
projection holds once it has caught up (SPEC O5: a database blip is not an outage)."""

from __future__ import annotations

import logging
from typing import Final, Literal

from fastapi import APIRouter
from nats.js.errors import NotFoundError
from pydantic import BaseModel

from jpu.bus import EventBus
from jpu.events import MaintenanceChanged, decode, subject_for
from jpu.runtime.resilience import within
from jpu_services.gateway.deps import EdgesDep
from jpu_services.gateway.errors import unreachable_dependency

router = APIRouter(prefix="/v1/maintenance", tags=["maintenance"])
log = logging.getLogger("jpu.gateway.maintenance")
QUERY_TIMEOUT_S: Final = 2.0  # then the log answers (one JetStream request)


class MaintenanceStatus(BaseModel):
    state: Literal["NORMAL", "DRAINING", "BACKFILL_RECOVERY", "ACTIVE"]
    since: float | None  # None: never in maintenance since the log began
    message: str


_NEVER = MaintenanceStatus(state="NORMAL", since=None, message="")


@router.get("/status")
async def status(edges: EdgesDep) -> MaintenanceStatus:
    try:
        row = await within(  # a hung database counts as away
            edges.pool.fetchrow("SELECT state, since, message FROM maintenance WHERE id = 1"),
            QUERY_TIMEOUT_S,
            "maintenance status",
        )
    except Exception as e:
        if unreachable_dependency(e) is None:
            raise
        log.warning("maintenance status from the log: database unavailable",
                    extra={"error": repr(e)})  # fmt: skip
        return await from_log(edges.bus)
    if row is None:  # no MaintenanceChanged in the log yet
        return _NEVER
    return MaintenanceStatus(state=row["state"], since=row["since"], message=row["message"])


async def from_log(bus: EventBus) -> MaintenanceStatus:
    """The last MaintenanceChanged in the log, as the projection folds it (the last one wins)."""
    probe = MaintenanceChanged(event_id="", ts=0.0, state="NORMAL", by="")
    try:
        msg = await bus.js.get_last_msg(bus.stream, subject_for(probe, bus.prefix))
    except NotFoundError:
        return _NEVER
    event = decode(msg.data or b"")
    assert isinstance(event, MaintenanceChanged), event
    return MaintenanceStatus(state=event.state, since=event.ts, message=event.message)
