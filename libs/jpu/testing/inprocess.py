"""The whole JPU-Share stack in one process, for tests (SPEC §5–§7): real NATS JetStream and
PostgreSQL, the real gateway app (over ASGI, with its projections), intake, dispatcher,
accounting, the slurm-agent and the backfill service on whichever backends the test gives.
Periods are short (lease 2 s); every service runs with the system clock, as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import asyncpg
import httpx

from jpu.admin import seed_demo
from jpu.backends import ExecutionBackend
from jpu.bus import EventBus
from jpu.clock import SystemClock
from jpu.config import Config
from jpu.edges import Edges, connect_edges
from jpu.fold_testing import Watcher
from jpu.service import run_workers
from jpu_services.accounting import bootstrap as accounting
from jpu_services.backfill.service import BackfillOptions, BackfillStats, run_backfill
from jpu_services.dispatcher.service import run_dispatcher
from jpu_services.gateway.app import create_app
from jpu_services.gateway.config import GatewayConfig
from jpu_services.intake import bootstrap as intake
from jpu_services.slurm_agent.options import AgentOptions
from jpu_services.slurm_agent.run import run_agent

Worker = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


def service_workers(
    edges: Edges,
    config: Config,
    agent_backend: ExecutionBackend,
    backfill_backend: Any,  # a BackfillBackend
    agent_options: AgentOptions,
    backfill_options: BackfillOptions,
    stats: BackfillStats | None = None,
) -> dict[str, Worker]:
    """Every service but the gateway, as `run_workers` runs them; each backend is closed when
    its service stops."""
    clock = SystemClock()

    async def dispatcher(stop: asyncio.Event) -> None:
        await run_dispatcher(edges.bus, config, clock, stop, lease_ttl_s=2.0, lease_renew_s=0.5)

    async def agent(stop: asyncio.Event) -> None:
        try:
            await run_agent(edges.bus, config, agent_backend, clock, stop, agent_options)
        finally:
            await agent_backend.close()

    async def backfill(stop: asyncio.Event) -> None:
        try:
            await run_backfill(
                edges.bus, config, backfill_backend, clock, stop, backfill_options, stats
            )
        finally:
            await backfill_backend.close()

    return {
        **intake.workers(edges),
        **accounting.workers(edges),
        "dispatcher": dispatcher,
        "agent": agent,
        "backfill": backfill,
    }


@contextlib.asynccontextmanager
async def inprocess_stack(
    config: Config,
    pool: asyncpg.Pool,
    workers: Callable[[Edges], dict[str, Worker]],
    leftovers: Callable[[], Awaitable[None]],
) -> AsyncIterator[tuple[httpx.AsyncClient, Watcher, EventBus]]:
    """The demo users seeded, the services running, a gateway client, a watcher and the test's
    own bus. On exit the services stop, `leftovers()` ends what outlives them by design (jobs,
    backfill instances), and the stream is deleted."""
    await seed_demo(pool)
    app = create_app(GatewayConfig.from_config(config, env={}))
    edges = await connect_edges(config, name="services")
    bus = await EventBus.connect(
        config.nats_url, stream=config.stream_name, prefix=config.subject_prefix
    )
    stop = asyncio.Event()
    task = asyncio.create_task(run_workers(stop, workers(edges), 10.0))
    try:
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as c,
            Watcher(bus, config) as w,
        ):
            yield c, w, bus
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
        await leftovers()
        await edges.close()
        await bus.delete_stream()
        await bus.close()
