"""The whole JPU-Share stack in one process, for tests (SPEC §5–§7): real NATS JetStream and
PostgreSQL, the real gateway app (over ASGI, with its projections), intake, dispatcher,
accounting, the slurm-agent and the backfill service on whichever backends the test gives.
Periods are short (lease 2 s); every service runs with the system clock, as in production.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import asyncpg
import httpx

from jpu.backends import ExecutionBackend
from jpu.bus import EventBus
from jpu.config import Config
from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.service import run_workers
from jpu.store.projection import wait_applied
from jpu.testing.fold import Watcher
from jpu.tools.admin import seed_demo
from jpu.tools.identities import Identities
from jpu_services.accounting import bootstrap as accounting
from jpu_services.backfill.service import BackfillOptions, BackfillStats, run_backfill
from jpu_services.dispatcher.service import DispatcherStats, run_dispatcher
from jpu_services.gateway.app import create_app
from jpu_services.gateway.config import GatewayConfig
from jpu_services.intake import bootstrap as intake
from jpu_services.slurm_agent.options import AgentOptions
from jpu_services.slurm_agent.run import run_agent

Worker = Callable[[asyncio.Event], Coroutine[Any, Any, None]]

log = logging.getLogger(__name__)


def service_workers(
    edges: Edges,
    config: Config,
    agent_backend: ExecutionBackend,
    backfill_backend: Any,  # a BackfillBackend
    agent_options: AgentOptions,
    backfill_options: BackfillOptions,
    stats: BackfillStats | None = None,
    dispatcher_stats: DispatcherStats | None = None,
) -> dict[str, Worker]:
    """Every service but the gateway, as `run_workers` runs them; each backend is closed when
    its service stops."""
    clock = SystemClock()

    async def dispatcher(stop: asyncio.Event) -> None:
        await run_dispatcher(
            edges.bus, config, clock, stop, lease_ttl_s=2.0, lease_renew_s=0.5,
            stats=dispatcher_stats,
        )  # fmt: skip

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
async def serve_http(app: Any) -> AsyncIterator[str]:
    """The app (lifespan already entered) under uvicorn on a free local port: real HTTP, for
    clients in other processes (the CLI) and for streamed answers, which httpx's ASGI transport
    buffers whole. Yields the base URL."""
    import uvicorn  # the gateway's server; only tests that serve HTTP need it here

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, lifespan="off", log_level="error")
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()  # raises why it did not start
            raise RuntimeError("uvicorn stopped before it started")
        await asyncio.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


@contextlib.asynccontextmanager
async def inprocess_stack(
    config: Config,
    pool: asyncpg.Pool,
    workers: Callable[[Edges], dict[str, Worker]],
    leftovers: Callable[[], Awaitable[None]],
    *,
    http: bool = False,
) -> AsyncIterator[tuple[httpx.AsyncClient, Watcher, EventBus]]:
    """The demo users seeded, the services running, a gateway client, a watcher and the test's
    own bus. On exit the services stop, `leftovers()` ends what outlives them by design (jobs,
    backfill instances), and the stream is deleted. `http`: the client talks real HTTP to the
    gateway under uvicorn (its `base_url` is the server's), not through the ASGI transport."""
    app = create_app(GatewayConfig.from_config(config, env={}))
    edges = await connect_edges(config, name="services", timeout_s=60.0)  # a test fails, not hangs
    bus = await EventBus.connect(
        config.nats_url, stream=config.stream_name, prefix=config.subject_prefix
    )
    await seed_demo(Identities(bus, None, time.time(), by="tests"))  # SEC3: as events
    seeded = await bus.last_seq()
    stop = asyncio.Event()
    task = asyncio.create_task(run_workers(stop, workers(edges), 10.0))
    task.add_done_callback(_report_crash)  # a crashed service must not look like a stuck job
    try:
        async with contextlib.AsyncExitStack() as scope:
            await scope.enter_async_context(app.router.lifespan_context(app))
            await wait_applied(pool, "identities", seeded, timeout=30.0)  # its projector's fold
            if http:
                url = await scope.enter_async_context(serve_http(app))
                client = httpx.AsyncClient(base_url=url, timeout=30.0)
            else:
                client = httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://gw"
                )
            c = await scope.enter_async_context(client)
            w = await scope.enter_async_context(Watcher(bus, config))
            yield c, w, bus
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 15)
        await leftovers()
        await edges.close()
        await bus.delete_stream()
        await bus.close()


def _report_crash(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (e := task.exception()) is not None:
        log.error("in-process services stopped by a crash", exc_info=e)
