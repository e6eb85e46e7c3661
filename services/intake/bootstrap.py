"""Composition root of the intake service: configuration → bus + database → workers."""

from __future__ import annotations

import asyncio

from jpu.backends.workdir_check import check_enabled
from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.service import Worker
from jpu_services.intake.config import IntakeConfig
from jpu_services.intake.service import run_intake


async def bootstrap(config: IntakeConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and the pool (applying migrations)."""
    return await connect_edges(config.base, name="intake", stop=stop)


def workers(edges: Edges) -> dict[str, Worker]:
    """Submit/cancel commands and promotion (SPEC Q1-Q6), any number of replicas."""

    async def intake(stop: asyncio.Event) -> None:
        await run_intake(
            edges.bus, edges.config, SystemClock(), stop, pool=edges.pool,
            workdir_check=check_enabled(),  # U5: JPU_WORKDIR_CHECK=0 where accounts differ
        )  # fmt: skip

    return {"intake": intake}
