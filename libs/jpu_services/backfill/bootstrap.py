"""Composition root of the backfill service: configuration → bus + database → workers."""

from __future__ import annotations

import asyncio
import logging

from jpu.backends import make_backend
from jpu.backends.backfill_contract import BackfillBackend
from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.service import Worker
from jpu_services.backfill.config import BackfillConfig
from jpu_services.backfill.service import run_backfill

log = logging.getLogger(__name__)


async def bootstrap(config: BackfillConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and the pool (applying migrations)."""
    return await connect_edges(config.base, name="backfill", stop=stop)


def workers(edges: Edges, config: BackfillConfig | None = None) -> dict[str, Worker]:
    """The backfill loop (SPEC §6) over the configured backend's backfill extension. Stopping
    the service never stops the instances: a restarted service re-adopts them."""
    config = config or BackfillConfig.from_config(edges.config)
    backend = make_backend(edges.config)

    async def backfill(stop: asyncio.Event) -> None:
        try:
            if not isinstance(backend, BackfillBackend):
                log.warning("backend %s runs no backfill: idle", backend.name)
                await stop.wait()
                return
            options = config.options()
            await run_backfill(edges.bus, edges.config, backend, SystemClock(), stop, options)
        finally:
            await backend.close()

    return {"backfill": backfill}
