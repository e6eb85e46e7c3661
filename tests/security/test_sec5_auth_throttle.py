"""SPEC SEC5 against the real gateway (its lifespan on real NATS + PostgreSQL): the attack of
issue 33 — a burst of wrong bearer tokens — meets 429 with `Retry-After` after
`auth_fail_limit` failures, is logged as a security event and counted (`jpu.auth.failures`),
and another client address with a good token is not affected."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from jpu.config import load_config
from jpu.runtime import metrics
from jpu.testing.api import assert_error, bearer
from jpu.testing.nats_fixtures import unique_names
from jpu.tools.admin import seed_demo
from jpu.tools.identities import Identities
from jpu_services.gateway.app import create_app
from jpu_services.gateway.config import GatewayConfig

LIMIT = 5


@pytest_asyncio.fixture
async def gateway(nats_url: str, pool: asyncpg.Pool, pg_dsn: str) -> AsyncIterator[FastAPI]:
    stream, prefix = unique_names()
    env = {
        "JPU_NATS_URL": nats_url, "JPU_DATABASE_URL": pg_dsn, "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix, "JPU_AUTH_FAIL_LIMIT": str(LIMIT),
        "JPU_AUTH_FAIL_WINDOW_S": "60",
    }  # fmt: skip
    app = create_app(GatewayConfig.from_config(load_config(env=env), env={}))
    async with app.router.lifespan_context(app):
        await seed_demo(Identities(app.state.edges.bus, pool, time.time(), by="tests"))
        yield app


def _client(app: FastAPI, address: str) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    return httpx.AsyncClient(transport=transport, base_url="http://gw")


async def test_wrong_tokens_throttled_per_client_429_retry_after_SEC5(
    gateway: FastAPI, caplog: pytest.LogCaptureFixture
) -> None:
    reader = InMemoryMetricReader()
    metrics.use_meter_provider(MeterProvider(metric_readers=[reader]))
    try:
        async with _client(gateway, "192.0.2.7") as attacker, _client(gateway, "192.0.2.8") as ok:
            first = time.monotonic()  # no failure of this client is older than this
            with caplog.at_level(logging.WARNING):
                codes = [
                    (await attacker.get("/v1/jobs", headers=bearer(token=f"guess-{i}"))).status_code
                    for i in range(LIMIT + 20)
                ]
            assert codes == [401] * LIMIT + [429] * 20
            r = await attacker.get("/v1/jobs", headers=bearer("alice"))  # even a good token
            assert_error(r, 429, "RATE_LIMITED")
            # until the first failure leaves the 60 s window: at most 60 s, less what has passed
            retry_after, passed = int(r.headers["Retry-After"]), time.monotonic() - first
            assert 60 - passed <= retry_after <= 60, (retry_after, passed)
            # another client, with a good token, is not affected
            assert (await ok.get("/v1/jobs", headers=bearer("alice"))).status_code == 200
            assert (await ok.get("/v1/jobs", headers=bearer(token="typo"))).status_code == 401
        events = [r for r in caplog.records if getattr(r, "security_event", "") == "auth_failed"]
        assert [getattr(r, "client", "") for r in events] == ["192.0.2.7"] * LIMIT + ["192.0.2.8"]
        counted = _sum_by_outcome(reader)
        assert counted == {"refused": LIMIT + 1, "throttled": 21}
    finally:
        metrics.use_meter_provider(None)


def _sum_by_outcome(reader: InMemoryMetricReader) -> dict[str, int]:
    out: dict[str, int] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == "jpu.auth.failures":
                    for p in m.data.data_points:
                        outcome = str((p.attributes or {}).get("outcome"))
                        out[outcome] = out.get(outcome, 0) + int(p.value)  # type: ignore[union-attr]
    return out
