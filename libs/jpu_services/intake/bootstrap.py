"""Composition root of the intake service: configuration → bus + database → workers."""

from __future__ import annotations

import asyncio

from jpu.backends.workdir_check import check_enabled
from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.resilience import Unavailable, retry
from jpu.runtime.service import Worker
from jpu_services.intake.config import IntakeConfig
from jpu_services.intake.service import run_intake


async def bootstrap(config: IntakeConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and a pool that connects on first use: intake
    decides from the log, so it starts and accepts submits while PostgreSQL is away (SPEC O5);
    the database only refines the per-user limits (jpu_services.intake.promote, which waits
    it out). The schema is the other services' and `prepare`'s to migrate."""
    return await connect_edges(
        config.base, name="intake", stop=stop, run_migrations=False, lazy_pool=True
    )


def workers(edges: Edges) -> dict[str, Worker]:
    """Submit/cancel commands and promotion (SPEC Q1-Q6), any number of replicas."""

    async def intake(stop: asyncio.Event) -> None:
        await run_intake(
            edges.bus, edges.config, SystemClock(), stop, pool=edges.pool,
            workdir_check=check_enabled(),  # U5: JPU_WORKDIR_CHECK=0 where accounts differ
        )  # fmt: skip

    async def database(stop: asyncio.Event) -> None:
        """The lazy pool's first connection, waited for as any start step (an outage is
        retried, a verdict such as a database that does not exist fails the process)."""
        try:
            await retry("PostgreSQL", lambda: edges.pool.fetchval("SELECT 1"), stop=stop)
        except Unavailable:
            if stop.is_set():  # stopped while it was away: a stop, not a crash
                return
            raise
        await stop.wait()

    return {"intake": intake, "database": database}
