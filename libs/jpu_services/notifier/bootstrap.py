"""Composition root of the notifier: configuration → bus + database → workers."""

from __future__ import annotations

import asyncio

from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.service import Worker
from jpu_services.notifier.config import NotifierConfig
from jpu_services.notifier.service import run_notifier


async def bootstrap(config: NotifierConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and the pool (applying migrations)."""
    return await connect_edges(config.base, name="notifier", stop=stop)


def workers(edges: Edges, config: NotifierConfig | None = None) -> dict[str, Worker]:
    """Follow the log, record what is owed, send it (SPEC Q10)."""
    config = config or NotifierConfig.from_config(edges.config)

    async def notify(stop: asyncio.Event) -> None:
        await run_notifier(edges.bus, edges.pool, config, stop)

    return {"notifier": notify}
