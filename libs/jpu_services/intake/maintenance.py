"""An admin's maintenance request, decided and appended by intake (SPEC M1/M4, SEC2: the
gateway publishes commands; intake owns the admin's `MaintenanceChanged`).

The current state is the log's last maintenance event; the append carries its sequence as the
expected last subject sequence (SPEC E2), so two admins racing cannot both move maintenance.
Losing to the dispatcher's automatic steps (M2/M3) is decided again on the new state; only a
subject that keeps moving is answered 409 CONFLICT. Transitions: jpu.policy.maintenance.on_admin.
"""

from __future__ import annotations

from typing import Final

from jpu.bus import ConcurrencyConflict, EventBus
from jpu.commands import CommandReply, MaintenanceCommand, error_reply
from jpu.events import MaintenanceChanged, MaintenanceState, decode, new_event_id
from jpu.policy.maintenance import Rejected, on_admin

DECIDE_TRIES: Final = 50  # the dispatcher steps once per cycle; a lost race is decided again


async def current(bus: EventBus) -> tuple[MaintenanceState, int]:
    """(state, stream seq of the last MaintenanceChanged); NORMAL and 0 when there is none."""
    msg = await bus.last_message(f"{bus.prefix}.maintenance")
    if msg is None:
        return "NORMAL", 0
    event = decode(msg.data or b"")
    state = event.state if isinstance(event, MaintenanceChanged) else "NORMAL"
    return state, int(msg.seq or 0)


async def decide(bus: EventBus, cmd: MaintenanceCommand, now: float) -> CommandReply:
    for _ in range(DECIDE_TRIES):
        state, last = await current(bus)
        target = on_admin(state, cmd.action)
        if isinstance(target, Rejected):
            return error_reply(target.code, target.message, {"state": state, "action": cmd.action})
        event = MaintenanceChanged(
            event_id=new_event_id(),
            ts=now if cmd.ts is None else cmd.ts,
            state=target,
            by=cmd.by,
            message=cmd.message,
        )
        try:
            return CommandReply(
                status=200, seq=await bus.append(event, expected_last_subject_seq=last)
            )
        except ConcurrencyConflict:
            continue  # most often the dispatcher's own step: decide again on the new state
    return error_reply(
        "CONFLICT", "maintenance kept changing concurrently; retry", {"action": cmd.action}
    )
