"""Maintenance mode control (SPEC §8 `POST /v1/admin/maintenance`, §7 M1/M4). Admins only.

Intake appends `MaintenanceChanged` for the gateway (SPEC SEC2; jpu_services.intake.maintenance).
The current state is read from the log's last maintenance event, and the append carries that
event's sequence as the expected last subject sequence (SPEC E2): two admins racing cannot both
move maintenance; the loser gets 409 CONFLICT. Transitions are `jpu.policy.maintenance.on_admin`:
  start: NORMAL → DRAINING (M1); else 409 ALREADY_IN_MAINTENANCE
  end:   any maintenance state → NORMAL (M4; ending a drain early calls it off);
         NORMAL → 409 NOT_IN_MAINTENANCE
The automatic DRAINING → BACKFILL_RECOVERY → ACTIVE steps (M2, M3) are the dispatcher's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import AfterValidator, BaseModel, Field

from jpu.commands import MaintenanceCommand, maintenance_subject
from jpu.domain import limits
from jpu.store.projections.maintenance import read_maintenance
from jpu_services.gateway.deps import CurrentUser, EdgesDep
from jpu_services.gateway.errors import forbidden, responses
from jpu_services.gateway.routes._commands import caught_up, now, send

router = APIRouter(prefix="/v1/admin", tags=["admin"])


def _storable(text: str) -> str:
    why = limits.text_problem(text)  # NUL / unpaired surrogate: no store could hold it
    if why:
        raise ValueError(why)
    return text


StorableText = Annotated[str, AfterValidator(_storable)]


class MaintenanceRequest(BaseModel):
    action: Literal["start", "end"]
    message: StorableText = Field(
        default="", max_length=limits.MAX_MAINTENANCE_MESSAGE, pattern="^[^\\u0000]*$"
    )


@router.post(
    "/maintenance",
    responses=responses(
        400,
        401,
        403,
        409,
        s403="FORBIDDEN (admins only)",
        s409="ALREADY_IN_MAINTENANCE / NOT_IN_MAINTENANCE / CONFLICT",
    ),
)
async def maintenance(
    request: Request, body: MaintenanceRequest, user: CurrentUser, edges: EdgesDep
) -> dict[str, Any]:
    """`{"action": "start"|"end", "message"}` → the new `{state, since, message, by}`."""
    if not user.is_admin:
        raise forbidden("only an admin may start or end maintenance")
    # SPEC SEC2: intake decides and appends (jpu_services.intake.maintenance); the gateway's
    # NATS identity publishes no event.
    command = MaintenanceCommand(
        action=body.action, by=user.name, message=body.message, ts=now(request)
    )
    seq = (await send(edges, maintenance_subject(edges.bus.prefix), command)).seq
    await caught_up(edges, seq, projection="maintenance", request=request)
    status = await read_maintenance(edges.pool)
    return {**status, "seq": seq}
