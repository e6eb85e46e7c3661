"""LLM backfill in the simulator (SPEC §6): the backfill service's part, on the policy's planner.

When GPUs come back idle, a check is scheduled `backfill_settle_s` later (B1, B3); at the check
the policy's planner picks which of those GPUs get an LLM instance, on the rows the fold shows.
Dispatches preempt them (B2, `preempt`); backfill time is never charged (B5), only counted for
utilization.
"""

from __future__ import annotations

from jpu.domain.cluster import GpuKey
from jpu.domain.idle import backfill_id
from jpu.events import BackfillEnded, BackfillStarted
from jpu.policy.backfill_plan import plan_backfill
from jpu.policy.model import MaintenanceState
from jpu.sim.state import BACKFILL
from jpu.sim.world import World


def schedule_initial(sim: World) -> None:
    sim.at(sim.params.backfill_settle_s, BACKFILL, list(sim.cluster.keys))


def watch(sim: World, keys: list[GpuKey]) -> None:
    """These GPUs just became idle: look again once they have settled (B1, B3)."""
    if sim.params.backfill:
        sim.at(sim.now + sim.params.backfill_settle_s, BACKFILL, keys)


def on_check(sim: World, keys: list[GpuKey]) -> None:
    cl = sim.cluster
    idle = {k: cl.idle_since[k] for k in keys if k in cl.idle_since}
    maintenance: MaintenanceState = sim.state.maintenance.state  # type: ignore[assignment]
    plan = plan_backfill(
        [cl.row(k) for k in keys],
        {k: i.since for k, i in idle.items()},
        sim.now,
        sim.params.backfill_settle_s,
        maintenance,
    )
    for g in plan.start:
        sim.totals.backfills_started += 1
        key = (g.node, g.tier, g.index)
        bf_id = backfill_id(key, idle[key].seq)  # the backfill service's id (one per free period)
        cl.backfill_since[key] = sim.now
        sim.append(
            BackfillStarted(
                event_id="",
                ts=sim.now,
                backfill_id=bf_id,
                node=g.node,
                tier=g.tier,
                gpu=g.index,
                backend_job_id=f"sim-{bf_id}",
            )
        )


def preempt(sim: World, keys: list[GpuKey]) -> None:
    """B2: research always wins; the backfill instances on these GPUs end first."""
    for key in keys:
        backfill_id = sim.state.backfill.get(key)
        if backfill_id is None:
            continue
        sim.totals.backfill_gpu_s += sim.now - sim.cluster.backfill_since.pop(key)
        sim.totals.backfills_preempted += 1
        node, tier, gpu = key
        sim.append(
            BackfillEnded(
                event_id="",
                ts=sim.now,
                backfill_id=backfill_id,
                node=node,
                tier=tier,
                gpu=gpu,
                reason="preempted",
            )
        )


def close(sim: World, end: float) -> None:
    """Count backfill still running at the end (no event: the live system would keep it)."""
    for since in sim.cluster.backfill_since.values():
        sim.totals.backfill_gpu_s += max(0.0, end - since)
