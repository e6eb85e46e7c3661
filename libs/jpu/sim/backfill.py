"""LLM backfill in the simulator (SPEC §6): the backfill service's part, on the policy's planner.

When GPUs come back idle, a check is scheduled `backfill_settle_s` later (B1, B3); at the check
the policy's planner picks which of those GPUs get an LLM instance. Dispatches preempt them
(B2, in cycles.dispatch); backfill time is never charged (B5), only counted for utilization.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jpu.events import BackfillStarted
from jpu.policy import backfill as planner  # the backfill service's planner
from jpu.sim.state import BACKFILL

if TYPE_CHECKING:
    from jpu.sim.engine import Simulator


def schedule_initial(sim: Simulator) -> None:
    sim.at(sim.params.backfill_settle_s, BACKFILL, list(range(sim.cluster.capacity)))


def watch(sim: Simulator, positions: list[int]) -> None:
    """These GPUs just became idle: look again once they have settled (B1, B3)."""
    if sim.params.backfill:
        sim.at(sim.now + sim.params.backfill_settle_s, BACKFILL, positions)


def on_check(sim: Simulator, positions: list[int]) -> None:
    cl = sim.cluster
    gpus = [cl.gpus[p] for p in positions]
    idle_since = {
        (g.node, g.tier, g.index): cl.idle_since[p]
        for p, g in zip(positions, gpus, strict=True)
        if p in cl.idle_since
    }
    plan = planner.plan_backfill(gpus, idle_since, sim.now, sim.params.backfill_settle_s, "NORMAL")
    for g in plan.start:
        p = cl.pos[(g.node, g.tier, g.index)]
        sim.totals.backfills_started += 1
        backfill_id = f"bf-{sim.totals.backfills_started}"
        cl.start_backfill(p, backfill_id, sim.now)
        sim.log.emit(
            BackfillStarted,
            sim.now,
            backfill_id=backfill_id,
            node=g.node,
            tier=g.tier,
            gpu=g.index,
            backend_job_id=f"sim-{backfill_id}",
        )


def close(sim: Simulator, end: float) -> None:
    """Count backfill still running at the end (no event: the live system would keep it)."""
    for _, since in sim.cluster.backfill.values():
        sim.totals.backfill_gpu_s += max(0.0, end - since)
