"""Fixtures for the REST API tests (tests/integration/test_api_*.py): the real gateway app over
ASGI, with its lifespan (bus + pool + jobs/maintenance/gpu_resources projections), the lab_usage
projection and the real intake service, on real NATS JetStream + PostgreSQL. When intake does
not answer, the fixture fails naming it (never a skip).

Import the fixture into a test module: `from test_api_support import api_fixture  # noqa: F401`
(it registers as `api`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import msgspec
import nats.errors
import pytest
import pytest_asyncio

from jpu import auth, commands
from jpu.admin import seed_demo
from jpu.bus import EventBus
from jpu.clock import FakeClock
from jpu.config import Config, load_config
from jpu.edges import Edges
from jpu.events import Event, NodeInventoryObserved, new_event_id
from jpu.service import run_workers
from jpu.store.projection import run_projections, wait_applied
from jpu.testing.nats_fixtures import unique_names
from jpu_services.accounting.service import READ_MODELS
from jpu_services.gateway.app import create_app
from jpu_services.gateway.config import GatewayConfig
from jpu_services.intake import bootstrap

T0 = 1_700_000_000.0  # the FakeClock's start: event times in tests are near it
TOKENS = {
    "alice": "demo-bcg-alice",
    "bob": "demo-bcg-bob",  # lab BCG, role user
    "carol": "demo-kdg-carol",  # lab KDG, role user
    "admin": "demo-admin",  # lab BCG, role admin
    "zoe": "demo-bcg-zoe",  # lab BCG, max_active_jobs 0: her jobs stay in the personal queue
}
DEFAULT_NODES = {
    "gpu-4090x2-01": "rtx4090",
    "gpu-4090x2-02": "rtx4090",
    "gpu-3080tix2-01": "rtx3080ti",
    "gpu-3080tix2-02": "rtx3080ti",
}


def bearer(who: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS.get(who, who)}"}


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """SPEC §8: every error is `{"error": {"code", "message", "details"}}`."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return dict(body["error"])


@dataclass
class Api:
    client: httpx.AsyncClient
    app: Any
    bus: EventBus  # the test's own connection, to append facts other services would
    pool: asyncpg.Pool
    config: Config
    clock: FakeClock

    async def append(self, *events: Event, projection: str = "jobs") -> int:
        seq = 0
        for e in events:
            seq = await self.bus.append(e)
        await wait_applied(self.pool, projection, seq, timeout=15)
        return seq

    async def decide(self) -> None:
        """What the leading dispatcher publishes after a cycle on the log as it is now: the
        policy's order and pending reasons (D1, D7), through its own ViewPublisher. The gateway
        shows ranks and reasons from there only (issue 10 finding 6); these tests run no
        dispatcher, so that its appends do not move the jobs they arrange."""
        from jpu.domain.cluster import ClusterState, evolve
        from jpu.domain.dispatch import snapshot
        from jpu.policy.cycle import cycle
        from jpu_services.dispatcher.view import ViewPublisher

        state = ClusterState.new(self.config)
        async for d in self.bus.replay():
            evolve(state, d)
        now = self.clock.now()
        result = cycle(snapshot(state, self.config), now)
        publisher = ViewPublisher(self.bus)
        await publisher.publish(now, state.seq, result.order, dict(result.pending.items()))

    def kw(self, dt: float = 0.0) -> dict[str, Any]:
        return {"event_id": new_event_id(), "ts": self.clock.now() + dt}

    async def submit(
        self, who: str, body: dict[str, Any], key: str | None = None
    ) -> httpx.Response:
        headers = bearer(who) | ({"Idempotency-Key": key} if key else {})
        return await self.client.post("/v1/jobs", json=body, headers=headers)


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


@pytest_asyncio.fixture(name="api")
async def api_fixture(nats_url: str, pool: asyncpg.Pool, pg_dsn: str) -> AsyncIterator[Api]:
    stream, prefix = unique_names()
    env = {
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": pg_dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
    }
    config = load_config(env=env)
    await seed_demo(pool)
    await auth.add_user(pool, "bcg-zoe", "BCG", "user", max_active_jobs=0)
    await auth.install_token(pool, "bcg-zoe", TOKENS["zoe"])
    # Tests append job events directly (as intake would) with their own queue_entered_at; the
    # real intake must not race them with its own JobPromoted (Q5). With no free slot it never
    # promotes, so jobs it accepts stay in the personal queue and the tests promote explicitly.
    await pool.execute("UPDATE users SET max_active_jobs = 0")
    clock = FakeClock(T0)
    app = create_app(GatewayConfig.from_config(config, env={}))
    app.state.clock = clock
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix, name="pytest-api")
    stop = asyncio.Event()
    try:
        async with app.router.lifespan_context(app):
            edges: Edges = app.state.edges
            workers: dict[str, Any] = dict(bootstrap.workers(edges))

            async def usage_projection(s: asyncio.Event) -> None:  # accounting's read model
                await run_projections(edges.bus, edges.pool, READ_MODELS, stop=s)

            workers["projection.lab_usage"] = usage_projection
            async with _background(stop, workers):
                await _inventory(bus, pool, clock)
                await _wait_for_intake(bus, prefix)
                transport = httpx.ASGITransport(app=app)
                async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                    yield Api(c, app, bus, pool, config, clock)
    finally:
        await bus.delete_stream()
        await bus.close()


def job_body(**over: Any) -> dict[str, Any]:
    return {"name": "train", "command": "python train.py", "num_gpus": 1, **over}


def to_builtins(e: Event) -> dict[str, Any]:
    return dict(msgspec.to_builtins(e))
