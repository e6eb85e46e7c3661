"""Composition root of the backfill service: configuration → bus + database → workers."""

from __future__ import annotations

import asyncio

from jpu.edges import Edges, connect_edges
from jpu.service import Worker
from jpu_services.backfill.config import BackfillConfig


async def bootstrap(config: BackfillConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and the pool (applying migrations)."""
    return await connect_edges(config.base, name="backfill", stop=stop)


def workers(edges: Edges) -> dict[str, Worker]:
    """Nothing to run yet: the backfill duties (SPEC E4) come with the service logic;
    until then the process holds its connections and idles until stopped."""
    return {}
