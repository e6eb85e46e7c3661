"""Which events owe a lab usage, and how much (SPEC F1, F4, F5, R3, R4). Pure.

One rule for everyone: accounting appends a `UsageCharged` for each `Charge` this returns (its
event id is the charge id, so the charge lands once), and the services' fold keeps the charges
the log owes but accounting has not written yet, so a cycle right after a `JobEnded` already
ranks the lab with that attempt's cost (D1).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from jpu.events import ChargeReason, Event, JobEnded, ReservationReleased, UsageCharged
from jpu.policy.fairshare import ZERO_USAGE, charge
from jpu.policy.model import LabUsage

# (lab, current attempt) of a job the fold knows, or None.
JobOf = Callable[[str], tuple[str, int] | None]


@dataclass(frozen=True)
class Charge:
    charge_id: str
    lab: str
    amount: float
    at: float
    job_id: str | None
    reason: ChargeReason
    attempt: int | None = None


def charge_id(source_event_id: str) -> str:
    """The id of the UsageCharged a source event calls for (de-duplicated by the stream)."""
    return f"chg-{source_event_id}"


def charge_for(event: Event, job_of: JobOf) -> Charge | None:
    """The charge a source event calls for (None: nothing to charge).

    F4: an attempt's end charges its run and the reservation time not charged yet (R4); R3
    demotion, M1 maintenance and R5 capacity releases charge the held time at once."""
    if isinstance(event, JobEnded):
        job = job_of(event.job_id)
        held = event.gpu_seconds_startup + event.gpu_seconds_run + event.gpu_seconds_reserved
        amount = event.usage or held * event.tflops
        if job is None or amount <= 0:
            return None
        return Charge(
            charge_id(event.event_id),
            job[0],
            amount,
            event.ts,
            event.job_id,
            "job_end",
            event.attempt,
        )
    if isinstance(event, ReservationReleased) and event.charged_now:
        job = job_of(event.job_id)
        amount = event.gpu_seconds * event.tflops  # F1
        if job is None or amount <= 0:
            return None
        reason: ChargeReason = "demoted"
        if event.reason in ("maintenance", "capacity"):
            reason = event.reason
        return Charge(
            charge_id(event.event_id), job[0], amount, event.ts, event.job_id, reason, job[1]
        )
    return None


def with_owed(
    usage: Mapping[str, LabUsage], owed: Iterable[Charge], half_life_s: float
) -> dict[str, LabUsage]:
    """Each lab's usage with the charges the log owes applied in order, exactly as accounting
    will apply them (F3: `charge`), so ranking never waits for accounting's round trip."""
    out = dict(usage)
    for c in sorted(owed, key=lambda c: c.at):
        out[c.lab] = charge(out.get(c.lab, ZERO_USAGE), c.amount, c.at, half_life_s)
    return out


def usage_charged(c: Charge, usage: LabUsage, half_life_s: float) -> UsageCharged:
    """Accounting's `UsageCharged` for `c` on the lab's current `usage` (F3: `charge`)."""
    after = charge(usage, c.amount, c.at, half_life_s)
    return UsageCharged(
        event_id=c.charge_id,
        ts=c.at,
        lab=c.lab,
        amount=c.amount,
        value_after=after.value,
        as_of=after.as_of,
        job_id=c.job_id,
        reason=c.reason,
        attempt=c.attempt,
    )
