"""Maintenance mode control (SPEC §8 `POST /v1/admin/maintenance`, §7 M1/M4). Admins only.

The gateway appends `MaintenanceChanged` itself (there is no decision beyond the transition rule).
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
from nats.js.errors import NotFoundError
from pydantic import AfterValidator, BaseModel, Field

from jpu.bus import ConcurrencyConflict, EventBus
from jpu.domain import limits
from jpu.events import MaintenanceChanged, MaintenanceState, decode, new_event_id
from jpu.policy.maintenance import Rejected, on_admin
from jpu.store.projections.maintenance import read_maintenance
from jpu_services.gateway.deps import CurrentUser, EdgesDep
from jpu_services.gateway.errors import ApiError, forbidden, responses
from jpu_services.gateway.routes._commands import caught_up, now

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


async def _current(bus: EventBus) -> tuple[MaintenanceState, int]:
    """(state, stream seq of the last MaintenanceChanged); NORMAL and 0 when there is none."""
    subject = f"{bus.prefix}.maintenance"
    try:
        msg = await bus.js.get_last_msg(bus.stream, subject)
    except NotFoundError:
        return "NORMAL", 0
    event = decode(msg.data or b"")
    state = event.state if isinstance(event, MaintenanceChanged) else "NORMAL"
    return state, int(msg.seq or 0)


_DECIDE_TRIES = 5


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
    for attempt in range(_DECIDE_TRIES):
        current, last = await _current(edges.bus)
        target = on_admin(current, body.action)  # SPEC M1/M4: the policy core's state machine
        if isinstance(target, Rejected):
            details = {"state": current, "action": body.action}
            raise ApiError(409, target.code, target.message, details)
        event = MaintenanceChanged(
            event_id=new_event_id(), ts=now(request), state=target, by=user.name,
            message=body.message,
        )  # fmt: skip
        try:
            seq = await edges.bus.append(event, expected_last_subject_seq=last)
            break
        except ConcurrencyConflict as e:
            # Maintenance moved between our read and our append — most often the dispatcher's
            # own automatic step (DRAINING → BACKFILL_RECOVERY → ACTIVE, M2/M3). Decide again
            # on the new state; only a subject that keeps moving is the caller's to retry.
            if attempt == _DECIDE_TRIES - 1:
                raise ApiError(
                    409, "CONFLICT", "maintenance kept changing concurrently; retry",
                    {"action": body.action},
                ) from e  # fmt: skip
    await caught_up(edges, seq, projection="maintenance", request=request)
    status = await read_maintenance(edges.pool)
    return {**status, "seq": seq}
