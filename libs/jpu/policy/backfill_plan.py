"""LLM backfill planning (SPEC B1–B5, M1–M2). Pure: the backfill service applies the plan."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from jpu.policy.maintenance import backfill_allowed, reclaim_backfill
from jpu.policy.model import Gpu, MaintenanceState

GpuKey = tuple[str, str, int]  # (node, tier, index)


class BackfillPlan(msgspec.Struct, frozen=True):
    start: list[Gpu] = []  # one LLM instance per GPU (B1)
    reclaim: list[str] = []  # backfill ids to cancel (M2)


def backfill_ids(gpus: Iterable[Gpu]) -> list[str]:
    """Every running backfill: on idle GPUs (`backfill:<id>`) and on reserved ones (R2)."""
    out: dict[str, None] = {}
    for g in gpus:
        if g.state.startswith("backfill:"):
            out[g.state[len("backfill:") :]] = None
        elif g.backfill:
            out[g.backfill] = None
    return list(out)


def plan_backfill(
    gpus: Iterable[Gpu],
    idle_since: Mapping[GpuKey, float],
    now: float,
    settle_s: float,
    maintenance_state: MaintenanceState,
) -> BackfillPlan:
    """B1/B3: start on GPUs `free` for at least `settle_s`; M2: reclaim all in recovery.

    Only `free` GPUs qualify: a reserved GPU may keep an existing backfill (R2) but gets no new
    one, and a GPU whose idle start is unknown is not started (the caller records it first).
    """
    gpus = list(gpus)
    if reclaim_backfill(maintenance_state):
        return BackfillPlan(reclaim=backfill_ids(gpus))
    if not backfill_allowed(maintenance_state):
        return BackfillPlan()
    start = [
        g
        for g in gpus
        if g.state == "free"
        and (since := idle_since.get((g.node, g.tier, g.index))) is not None
        and now - since >= settle_s
    ]
    return BackfillPlan(start=start)
