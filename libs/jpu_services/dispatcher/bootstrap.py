"""Composition root of the dispatcher service: configuration → bus + database → workers."""

from __future__ import annotations

import asyncio

from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.service import Worker
from jpu_services.dispatcher.config import DispatcherConfig
from jpu_services.dispatcher.service import run_dispatcher


async def bootstrap(config: DispatcherConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and the pool (applying migrations)."""
    return await connect_edges(config.base, name="dispatcher", stop=stop)


def workers(edges: Edges) -> dict[str, Worker]:
    """The dispatch cycle behind the leader lease (SPEC §4, E4)."""

    async def dispatcher(stop: asyncio.Event) -> None:
        await run_dispatcher(edges.bus, edges.config, SystemClock(), stop)

    return {"dispatcher": dispatcher}
