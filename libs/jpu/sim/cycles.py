"""A cycle's decisions into the log, as the dispatcher appends them (decide.cycle_events), and
what the simulated cluster does about them: a dispatch preempts backfill on its GPUs (B2) and
the backend starts it at once.

Order (cycle_events'): shrinks (R5, R6 yield), releases (R3, swap, ...), new reservations, grown
reservations, loans (R7 lent shrinks), dispatches. Every change is one event, stamped with the
cycle's virtual time.
"""

from __future__ import annotations

from jpu.domain.dispatch import cycle_events
from jpu.events import JobDispatched
from jpu.policy.model import CycleResult
from jpu.sim import backend, backfill_service
from jpu.sim.world import World


def apply(sim: World, result: CycleResult) -> None:
    for e in cycle_events(result, sim.tiers, sim.now):
        if isinstance(e, JobDispatched):
            backfill_service.preempt(sim, [(e.node, e.tier, i) for i in e.gpus])
            backend.start(sim, sim.append(sim.dispatched(e)))
        else:
            sim.append(e)
