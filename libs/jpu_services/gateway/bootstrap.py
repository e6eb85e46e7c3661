"""Composition root of the gateway: configuration → bus + database → projector workers."""

from __future__ import annotations

import asyncio

from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.service import Worker
from jpu.store.projection import Projection, run_projections
from jpu.store.projections import (
    backfill_instances,
    gpu_resources,
    identities,
    jobs,
    maintenance,
    workspaces,
)
from jpu_services.gateway.config import GatewayConfig

# The read models the API serves; lab_usage is accounting's (SPEC E4).
PROJECTIONS: dict[str, Projection] = {
    "jobs": jobs.projection,
    "maintenance": maintenance.projection,
    "gpu_resources": gpu_resources.projection,
    "backfill": backfill_instances.projection,
    "workspaces": workspaces.projection,  # X4a
    "identities": identities.projection,  # SEC3: who may authenticate, from the log
}


async def bootstrap(config: GatewayConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and a pool that connects on first use: the
    gateway starts and serves what the log knows while PostgreSQL is away (SPEC O5); the
    migrations, the position watch and the projector follow once it answers (app.py)."""
    return await connect_edges(
        config.base, name="gateway", stop=stop, run_migrations=False, lazy_pool=True
    )


def workers(config: GatewayConfig, edges: Edges) -> dict[str, Worker]:
    """The `projector` role: one ordered read of the log feeds every projection, each event
    applied exactly once (SPEC E3)."""
    if not config.projector:
        return {}

    async def run(stop: asyncio.Event) -> None:
        await run_projections(edges.bus, edges.pool, tuple(PROJECTIONS.values()), stop=stop)

    return {"projections": run}
