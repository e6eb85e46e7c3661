"""Fair-share arithmetic (SPEC F1–F6): cost in TFLOP-s, half-life decay, lazy charging."""

from __future__ import annotations

from jpu.policy.model import LabUsage, Reservation

ZERO_USAGE = LabUsage()  # SPEC F6: a lab with no usage has usage 0


def cost(gpus: int, seconds: float, tflops: float) -> float:
    """SPEC F1: `gpus × seconds × tflops` TFLOP-s (one rtx4090-hour = 297,360)."""
    return gpus * seconds * tflops


def accrued(gpus: int, since: float, now: float, tflops: float) -> float:
    """SPEC F1/F4: what `gpus` held since `since` (a running attempt from its dispatch, F5; a
    reservation from its start) have cost by `now` — not charged yet: lazy charging charges it
    when the attempt ends (a reservation at R3), so the usage that ranks (D1) leaves it out."""
    return cost(gpus, max(0.0, now - since), tflops)


def decayed(usage: LabUsage, t: float, half_life_s: float) -> float:
    """SPEC F3: `value × 0.5 ** ((t − as_of) / half_life)`.

    Reading usage at a time before its `as_of` returns the stored value unchanged: decay only
    runs forward, so a reader with a slightly older clock never sees usage inflated.
    """
    if t <= usage.as_of or usage.value == 0.0:
        return usage.value
    return usage.value * 0.5 ** ((t - usage.as_of) / half_life_s)


def charge(usage: LabUsage, amount: float, t: float, half_life_s: float) -> LabUsage:
    """SPEC F3: `value = decayed(t) + amount`, `as_of = t`.

    A charge dated before `as_of` (late event) is applied at `as_of` instead: usage is never
    decayed backwards, and the amount itself is charged in full either way (F5).
    """
    at = max(t, usage.as_of)
    return LabUsage(value=decayed(usage, at, half_life_s) + amount, as_of=at)


def attempt_cost(
    run_gpus: int, run_s: float, reserved_gpu_seconds_uncharged: float, tflops: float
) -> float:
    """SPEC F2/F4: an attempt's whole cost at its end = run + reservation time not yet charged.

    Example: 2 rtx4090 × 30 min + 1 × 10 min reserved = (3600 + 600) × 82.6 = 346,920.
    """
    return (run_gpus * run_s + reserved_gpu_seconds_uncharged) * tflops


def held_gpu_seconds(reservation: Reservation, now: float) -> float:
    """GPU-seconds a reservation has held up to `now` (SPEC F2).

    With `joined` (time each GPU entered the reservation, R2 grows) every GPU is counted from
    its own start; without it all GPUs count from `since`.
    """
    if reservation.joined:
        return sum(max(0.0, now - t) for t in reservation.joined)
    return len(reservation.gpus) * max(0.0, now - reservation.since)
