"""The slurm-agent's loops outlive a failed round (SPEC O5): an error is logged and the round is
tried again, never the quiet end of the service."""

from __future__ import annotations

import asyncio
from typing import cast

from jpu.backends import ExecutionBackend, NodeInventory
from jpu.bus import EventBus
from jpu.events import NodeInventoryObserved
from jpu.runtime.clock import FakeClock
from jpu_services.slurm_agent.run import InventoryReporter


class FlakyInventory:
    """A backend whose inventory fails once (NATS or Slurm briefly away), then answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def inventory(self) -> list[NodeInventory]:
        self.calls += 1
        if self.calls == 1:
            raise ConnectionError("backend briefly unreachable")
        return [NodeInventory(node="n1", gpus={"a100": 2})]


async def test_O5_inventory_loop_retries_a_failed_round_instead_of_ending(bus: EventBus):
    backend = FlakyInventory()
    reporter = InventoryReporter(bus, cast(ExecutionBackend, backend), FakeClock(1.0))
    stop = asyncio.Event()
    loop = asyncio.create_task(reporter.loop(stop, every_s=0.05))
    try:
        async with asyncio.timeout(10):
            while not await bus.last_seq():
                assert not loop.done(), loop  # the failed round must not end the loop
                await asyncio.sleep(0.05)
        assert backend.calls >= 2 and not loop.done()
        [observed] = [d.event async for d in bus.replay()]
        assert isinstance(observed, NodeInventoryObserved) and observed.node == "n1"
    finally:
        stop.set()
        await asyncio.wait_for(loop, 5)
