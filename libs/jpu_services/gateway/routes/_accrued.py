"""What each lab's jobs in flight have cost so far but not been charged (SPEC F1, F4), shown
beside the charged usage that orders the queue (D1) and never mixed into it: lazy charging
charges an attempt when it ends, so a lab running 3 GPUs for hours may still rank with usage 0.

Counted from the jobs projection: a running attempt from its dispatch (F5), a reservation from
its start for every GPU it holds now (a reservation that grew counts its later GPUs from its
start too). Reservation time an attempt carried over from a swap (R4) is charged with its end
but not counted here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from jpu.config import Tier
from jpu.domain.states import PLACED
from jpu.policy.fairshare import accrued

# the jobs projection's columns a holding needs (the queue's rows and the running rows have them)
HOLDING_COLUMNS = (
    "lab, state, num_gpus, tier, gpus, dispatched_at, reservation_tier, reservation_gpus, "
    "reservation_since"
)


def _holdings(r: Any) -> Iterator[tuple[str | None, int, float | None]]:
    """(tier, GPUs, held since) of what a job row (asyncpg Record or dict) holds now."""
    if r.get("state") in PLACED:
        yield r.get("tier"), len(r.get("gpus") or []) or r["num_gpus"], r.get("dispatched_at")
    elif r.get("state") == "RESERVING":
        held = r.get("reservation_gpus") or []
        yield r.get("reservation_tier"), len(held), r.get("reservation_since")


def lab_accrued(rows: Iterable[Any], tiers: Mapping[str, Tier], now: float) -> dict[str, float]:
    """Lab -> TFLOP-s its running jobs and reservations have accrued by `now` (F1, via
    `jpu.policy.fairshare.accrued`), not yet charged (F4)."""
    out: dict[str, float] = {}
    for r in rows:
        for tier, gpus, since in _holdings(r):
            t = tiers.get(tier or "")
            if t is not None and since is not None and gpus:
                out[r["lab"]] = out.get(r["lab"], 0.0) + accrued(gpus, since, now, t.tflops)
    return out
