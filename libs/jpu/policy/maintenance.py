"""Maintenance mode (SPEC M1–M4) as a pure state machine.

    NORMAL --start--> DRAINING --(no user job DISPATCHED/RUNNING/CANCELLING)--> BACKFILL_RECOVERY
           --(no backfill left)--> ACTIVE --end--> NORMAL

Choice: `end` is accepted in every maintenance state, not only ACTIVE, so an operator can call
off a drain; `start` while already in maintenance is rejected (the state machine does not nest).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from jpu.policy.model import MaintenanceState

Action = Literal["start", "end"]


class Rejected(msgspec.Struct, frozen=True):
    code: str  # "ALREADY_IN_MAINTENANCE" | "NOT_IN_MAINTENANCE" | "UNKNOWN_ACTION"
    message: str


def on_admin(state: MaintenanceState, action: str) -> MaintenanceState | Rejected:
    if action == "start":
        if state != "NORMAL":
            return Rejected("ALREADY_IN_MAINTENANCE", f"maintenance already {state}")
        return "DRAINING"  # M1
    if action == "end":
        if state == "NORMAL":
            return Rejected("NOT_IN_MAINTENANCE", "maintenance is not running")
        return "NORMAL"  # M4
    return Rejected("UNKNOWN_ACTION", f"action must be start or end, not {action!r}")


def advance(
    state: MaintenanceState, user_jobs_active: int, backfill_active: int
) -> MaintenanceState:
    """One automatic step (M2, M3); call again until the state stops changing, emitting an
    event per step, so BACKFILL_RECOVERY is always recorded even when it lasts no time."""
    if state == "DRAINING" and user_jobs_active == 0:
        return "BACKFILL_RECOVERY"
    if state == "BACKFILL_RECOVERY" and backfill_active == 0:
        return "ACTIVE"
    return state


def submit_allowed(state: MaintenanceState) -> bool:
    return state == "NORMAL"  # Q3


def dispatch_allowed(state: MaintenanceState) -> bool:
    return state == "NORMAL"  # D6


def reservations_allowed(state: MaintenanceState) -> bool:
    return state == "NORMAL"  # D6, M1


def backfill_allowed(state: MaintenanceState) -> bool:
    return state in ("NORMAL", "DRAINING")  # M1 backfill keeps running; M2 none after


def reclaim_backfill(state: MaintenanceState) -> bool:
    return state in ("BACKFILL_RECOVERY", "ACTIVE")  # M2


def cancel_allowed(state: MaintenanceState) -> bool:
    return True  # M1: cancellation is allowed in every state
