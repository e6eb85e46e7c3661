"""pytest plugin: the fixtures for the tests that drive the gateway: `api` (the real gateway app
over ASGI, with its lifespan — bus + pool + jobs/maintenance/gpu_resources projections —, the
lab_usage projection and the real intake service, on real NATS JetStream + PostgreSQL), `server`
(that app under uvicorn on a free port, for the CLI as a separate process) and the notifier's
receivers `smtp` and `webhook`. When intake does not answer, the fixture fails naming it (never a
skip).

List it in tests/conftest.py: `pytest_plugins = [..., "jpu.testing.api_fixtures"]`."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import httpx
import nats.errors
import pytest
import pytest_asyncio
import uvicorn
from aiosmtpd.controller import Controller

from jpu import commands
from jpu.bus import EventBus
from jpu.config import load_config
from jpu.embedded.base import free_port
from jpu.events import NodeInventoryObserved, new_event_id
from jpu.runtime.clock import FakeClock
from jpu.runtime.edges import Edges
from jpu.runtime.service import run_workers
from jpu.store.projection import run_projections, wait_applied
from jpu.testing.api import DEFAULT_NODES, T0, TOKENS, Api
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.receivers import Received, SmtpHandler, Webhook
from jpu.tools.admin import DEMO_LABS, demo_users
from jpu.tools.identities import Identities
from jpu_services.accounting.service import READ_MODELS
from jpu_services.gateway.app import create_app
from jpu_services.gateway.config import GatewayConfig
from jpu_services.intake import bootstrap


async def _wait_for_intake(bus: EventBus, prefix: str, timeout_s: float = 30.0) -> None:
    """Probe with a cancel of a job that does not exist until intake answers at all; a service
    that never answers fails the test that needs it (a skip would hide it)."""
    probe = commands.encode(commands.CancelCommand(job_id="probe-none", by="probe"))
    deadline = asyncio.get_running_loop().time() + timeout_s
    while asyncio.get_running_loop().time() < deadline:
        try:
            await bus.nc.request(commands.cancel_subject(prefix), probe, timeout=1.0)
            return
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            await asyncio.sleep(0.05)
    pytest.fail(f"intake did not answer on {commands.cancel_subject(prefix)} in {timeout_s:.0f} s")


@contextlib.asynccontextmanager
async def _background(stop: asyncio.Event, workers: dict[str, Any]) -> AsyncIterator[None]:
    task = asyncio.create_task(run_workers(stop, workers, grace_s=5.0))
    try:
        yield
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)


async def _inventory(bus: EventBus, pool: asyncpg.Pool, clock: FakeClock) -> None:
    """What the slurm agent reports at start: the default cluster's nodes (SPEC §1.1)."""
    seq = 0
    for node, tier in DEFAULT_NODES.items():
        seq = await bus.append(
            NodeInventoryObserved(
                event_id=new_event_id(), ts=clock.now(), node=node, gpus={tier: 2}
            )
        )
    await wait_applied(pool, "gpu_resources", seq, timeout=15)


@pytest_asyncio.fixture
async def api(nats_url: str, pool: asyncpg.Pool, pg_dsn: str) -> AsyncIterator[Api]:
    stream, prefix = unique_names()
    env = {
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": pg_dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
    }
    config = load_config(env=env)
    clock = FakeClock(T0)
    app = create_app(GatewayConfig.from_config(config, env={}))
    app.state.clock = clock
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix, name="pytest-api")
    stop = asyncio.Event()
    try:
        async with app.router.lifespan_context(app):
            edges: Edges = app.state.edges
            # the demo users, as the admin tool adds them (identity events, SEC3), and bcg-zoe
            ids = Identities(bus, None, clock.now(), by="tests")  # the log's own clock
            # Tests append job events directly (as intake would) with their own
            # queue_entered_at; the real intake must not race them with its own JobPromoted
            # (Q5). With no free slot (max_active_jobs 0) it never promotes, so jobs it accepts
            # stay in the personal queue and the tests promote explicitly.
            for lab in DEMO_LABS:
                await ids.add_lab(lab)
            for u in demo_users():
                await ids.add_user(u.name, u.lab, u.role, max_active_jobs=0)
                await ids.install_token(u.name, u.token)
            await ids.add_user("bcg-zoe", "BCG", "user", max_active_jobs=0)
            await ids.install_token("bcg-zoe", TOKENS["zoe"])
            seeded = await bus.last_seq()
            workers: dict[str, Any] = dict(bootstrap.workers(edges))

            async def usage_projection(s: asyncio.Event) -> None:  # accounting's read model
                await run_projections(edges.bus, edges.pool, READ_MODELS, stop=s)

            workers["projection.lab_usage"] = usage_projection
            async with _background(stop, workers):
                await wait_applied(pool, "identities", seeded, timeout=30)
                await _inventory(bus, pool, clock)
                await _wait_for_intake(bus, prefix)
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                    yield Api(c, app, bus, pool, config, clock)
    finally:
        await bus.delete_stream()
        await bus.close()


@pytest_asyncio.fixture
async def server(api: Api) -> AsyncIterator[str]:
    """The `api` app under uvicorn on a free port (lifespan already running in `api`)."""
    config = uvicorn.Config(api.app, host="127.0.0.1", port=0, lifespan="off", log_level="error")
    srv = uvicorn.Server(config)
    task = asyncio.create_task(srv.serve())
    while not srv.started:
        assert not task.done(), task.exception()
        await asyncio.sleep(0.02)
    port = srv.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        await asyncio.wait_for(task, 10)


# SPEC Q10: the notifier's receivers (jpu.testing.receivers)
@pytest.fixture
def smtp() -> Iterator[tuple[int, Received]]:
    got = Received()
    port = free_port()
    controller = Controller(SmtpHandler(got), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield port, got
    finally:
        controller.stop()


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    hook = Webhook()
    try:
        yield hook
    finally:
        hook.stop()
