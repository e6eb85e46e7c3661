"""The accounting service loop (SPEC §3, E4): follow the log, charge, and (optionally) keep the
lab usage projection.

    run_accounting(bus, config, clock, stop, pool=None)

Safe to run as several replicas and to kill at any moment (O5): see charger.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from jpu.bus import Delivered, EventBus
from jpu.bus.fold_follow import Follower, SnapshotPolicy, caught_up
from jpu.config import Config
from jpu.domain.accounting import initial_charges
from jpu.domain.cluster import ClusterState
from jpu.runtime.clock import Clock
from jpu.runtime.metrics import observing_usage
from jpu.store.projection import Projection, run_projections
from jpu.store.projections import lab_usage, usage_ledger
from jpu_services.accounting.charger import Charger

log = logging.getLogger(__name__)

# Accounting's read models (SPEC E4), in one transaction per batch: the usage ledger's lines
# (SPEC F5) always add up to the lab_usage beside them (F5).
READ_MODELS: tuple[Projection, ...] = (lab_usage.projection, usage_ledger.projection)


async def run_accounting(
    bus: EventBus,
    config: Config,
    clock: Clock,
    stop: asyncio.Event,
    *,
    pool: asyncpg.Pool | None = None,
    charger_out: list[Charger] | None = None,
) -> None:
    state = ClusterState.new(config, keep_ended=False)  # SPEC O6: in-flight jobs only
    wake = asyncio.Event()
    charger: Charger

    def on_event(d: Delivered) -> None:
        charger.observe(d)
        wake.set()

    follower = Follower(bus, state, on_event, snapshots=SnapshotPolicy.from_config(bus, config))
    charger = Charger(bus, state, follower, config.half_life_s, stop)
    if charger_out is not None:
        charger_out.append(charger)
    await follower.restore()  # SPEC O6: the newest snapshot, then only the log's tail
    tasks = [asyncio.create_task(follower.run(stop))]
    if pool is not None:
        tasks.append(asyncio.create_task(run_projections(bus, pool, READ_MODELS, stop=stop)))
    try:
        await caught_up(follower, "accounting")
        # Whatever the log owes and no UsageCharged settled yet, including charges from before
        # a restored snapshot (the fold keeps them: ClusterState.owed), then O1's "at load".
        charger.add(list(state.owed.values()))
        charger.add(initial_charges(config, clock.now()))
        with observing_usage(state.usage, config, clock):  # SPEC O4: usage per lab
            while not stop.is_set():
                await charger.drain()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), 1.0)
                wake.clear()
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
