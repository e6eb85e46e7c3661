"""Composition root of the accounting service: configuration → bus + database → workers."""

from __future__ import annotations

import asyncio

from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.service import Worker
from jpu.store.projection import run_projections
from jpu_services.accounting.config import AccountingConfig
from jpu_services.accounting.service import READ_MODELS, run_accounting


async def bootstrap(config: AccountingConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and the pool (applying migrations)."""
    return await connect_edges(config.base, name="accounting", stop=stop)


def workers(edges: Edges) -> dict[str, Worker]:
    """Accounting owns the lab usage projections (SPEC E4): each event applied once (E3)."""

    async def project_lab_usage(stop: asyncio.Event) -> None:
        await run_projections(edges.bus, edges.pool, READ_MODELS, stop=stop)

    async def charge(stop: asyncio.Event) -> None:
        await run_accounting(edges.bus, edges.config, SystemClock(), stop)  # SPEC F3-F5

    return {"projection.lab_usage": project_lab_usage, "charger": charge}
