"""The gateway against real NATS JetStream + PostgreSQL: envelope, auth, /v1/me, maintenance."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx
import msgspec
import pytest_asyncio

from jpu.bus import EventBus
from jpu.config import load_config
from jpu.events import JobPromoted, JobSubmitted, MaintenanceChanged, new_event_id
from jpu.store import auth
from jpu.store.projection import wait_applied
from jpu.testing.api import bearer
from jpu.testing.nats_fixtures import unique_names
from jpu.tools.admin import seed_demo
from jpu.tools.identities import Identities
from jpu_services.gateway.app import create_app
from jpu_services.gateway.config import GatewayConfig


@pytest_asyncio.fixture
async def gateway_env(nats_url: str, pool: asyncpg.Pool, pg_dsn: str) -> AsyncIterator[dict]:
    stream, prefix = unique_names()
    env = {
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": pg_dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
    }
    yield env
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix)
    await bus.delete_stream()
    await bus.close()


@pytest_asyncio.fixture
async def client(gateway_env: dict, pool: asyncpg.Pool) -> AsyncIterator[httpx.AsyncClient]:
    """The real app, lifespan included (bus + pool + projector), over ASGI; the demo users added
    as the admin tool adds them (identity events, SEC3), `c.ids` to add more."""
    app = create_app(GatewayConfig.from_config(load_config(env=gateway_env), env={}))
    async with app.router.lifespan_context(app):
        ids = Identities(app.state.edges.bus, pool, time.time(), by="tests")
        await seed_demo(ids)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            c.app = app  # type: ignore[attr-defined]
            c.ids = ids  # type: ignore[attr-defined]
            yield c


def assert_envelope(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


async def test_A_gateway_errors_use_envelope(client: httpx.AsyncClient) -> None:
    # SPEC §8: missing or invalid token -> 401 UNAUTHENTICATED, always in the envelope.
    r = await client.get("/v1/me")
    assert_envelope(r, 401, "UNAUTHENTICATED")
    assert r.headers["www-authenticate"] == "Bearer"
    assert_envelope(
        await client.get("/v1/me", headers=bearer(token="not-a-token")), 401, "UNAUTHENTICATED"
    )
    assert_envelope(
        await client.get("/v1/me", headers={"Authorization": "Basic YTpi"}), 401, "UNAUTHENTICATED"
    )
    assert_envelope(await client.get("/v1/nope"), 404, "NOT_FOUND")
    err = assert_envelope(
        await client.get("/v1/tiers?active=perhaps", headers=bearer(token="demo-bcg-alice")),
        422,
        "VALIDATION_ERROR",
    )
    assert err["details"]["errors"][0]["loc"] == ["query", "active"]


async def test_A_health_ready_openapi_and_tiers(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    ready = await client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["database"] == "ok"
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert {"/healthz", "/readyz", "/v1/me", "/v1/tiers", "/v1/maintenance/status"} <= set(paths)
    tiers = (await client.get("/v1/tiers", headers=bearer(token="demo-kdg-carol"))).json()
    assert [t["name"] for t in tiers] == ["rtx4090", "rtx3080ti"]  # SPEC T1: best first
    assert tiers[0]["vram_gb"] == 24 and tiers[1]["partition"] == "rtx3080ti"


async def test_E3_readyz_is_degraded_while_a_projection_fault_is_recorded(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    await pool.execute(
        "INSERT INTO projection_faults (projection, seq, subject, event_type, error)"
        " VALUES ('jobs', 42, 'jpu.job.j1', 'JobSubmitted', 'UntranslatableCharacterError()')"
    )
    ready = await client.get("/readyz")
    assert ready.status_code == 200  # still serving: an alarm, not an outage
    assert ready.json()["status"] == "degraded"
    assert ready.json()["projection_faults"] == {"jobs": {"events": 1, "first_seq": 42}}
    await pool.execute("DELETE FROM projection_faults")
    assert (await client.get("/readyz")).json()["status"] == "ready"


async def test_A_readyz_names_the_failed_dependency(client: httpx.AsyncClient) -> None:
    await client.app.state.edges.pool.close()  # type: ignore[attr-defined]
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert set(r.json()["error"]["details"]) == {"database"}


async def test_O5_readyz_stays_ready_degraded_without_the_database(
    client: httpx.AsyncClient,
) -> None:
    """SPEC §8 readiness is the bus and the database: plain /readyz is 503 naming the database;
    a load balancer's probe (`?degraded=ok`) keeps the gateway in rotation, degraded, naming the
    database's error, since submits need only the log (routes/health.py)."""
    await client.app.state.edges.pool.close()  # type: ignore[attr-defined]
    plain = await client.get("/readyz")
    assert plain.status_code == 503 and set(plain.json()["error"]["details"]) == {"database"}
    r = await client.get("/readyz?degraded=ok")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "degraded" and r.json()["bus"] == "ok"
    assert "InterfaceError" in r.json()["database"], r.json()


async def test_O5_readyz_names_the_bus_when_the_log_is_away(client: httpx.AsyncClient) -> None:
    await client.app.state.edges.bus.close()  # type: ignore[attr-defined]
    r = await client.get("/readyz")
    assert r.status_code == 503, r.text
    assert r.json()["error"]["code"] == "NOT_READY"
    assert "bus" in r.json()["error"]["details"], r.json()


async def test_tokens_are_stored_hashed(client: httpx.AsyncClient, pool: asyncpg.Pool) -> None:
    token = await client.ids.create_token("osl-erin")  # type: ignore[attr-defined]
    assert len(token) >= 43  # 32 random bytes, URL-safe base64
    stored = [
        r["token_hash"]
        for r in await pool.fetch('SELECT token_hash FROM api_tokens WHERE "user" = $1', "osl-erin")
    ]
    assert hashlib.sha256(token.encode()).hexdigest() in stored
    dump = str(await pool.fetch("SELECT * FROM api_tokens"))
    assert token not in dump and "demo-osl-erin" not in dump  # no usable secret in the DB
    bus = client.app.state.edges.bus  # type: ignore[attr-defined]
    log = [bytes(m) async for m in _raw_identity_log(bus)]
    assert log and not any(token.encode() in m or b"demo-osl-erin" in m for m in log)  # SEC3
    me = await client.get("/v1/me", headers=bearer(token=token))
    assert me.status_code == 200 and me.json()["user"] == "osl-erin"


async def _raw_identity_log(bus: EventBus) -> AsyncIterator[bytes]:
    """The identity events as stored in the stream: the bytes an auditor would read."""
    async for d in bus.replay(filter_subject=f"{bus.prefix}.identity.>"):
        yield msgspec.json.encode(d.event)


async def test_A_me_counts_slot_holding_jobs(
    client: httpx.AsyncClient, gateway_env: dict, pool: asyncpg.Pool
) -> None:
    # SPEC §1.3/S1: slots in use = the caller's jobs in slot-holding states, from the projection.
    bus = await EventBus.connect(
        gateway_env["JPU_NATS_URL"],
        stream=gateway_env["JPU_STREAM_NAME"],
        prefix=gateway_env["JPU_SUBJECT_PREFIX"],
    )
    try:
        for job_id in ("j1", "j2"):
            await bus.append(
                JobSubmitted(
                    event_id=new_event_id(),
                    ts=100.0,
                    job_id=job_id,
                    lab="BCG",
                    user="bcg-bob",
                    name=job_id,
                    command="true",
                    num_gpus=1,
                )
            )
        seq = await bus.append(
            JobPromoted(event_id=new_event_id(), ts=101.0, job_id="j1", queue_entered_at=101.0)
        )
    finally:
        await bus.close()
    await wait_applied(pool, "jobs", seq, timeout=15)
    me = (await client.get("/v1/me", headers=bearer(token="demo-bcg-bob"))).json()
    # j2 waits in the personal queue (no slot), j1 is GLOBAL_QUEUE_WAIT (one slot).
    assert me == {
        "user": "bcg-bob",
        "lab": "BCG",
        "role": "user",
        "max_active_jobs": 3,
        "slots_in_use": 1,
    }


async def test_M5_maintenance_status_is_anonymous(
    client: httpx.AsyncClient, gateway_env: dict, pool: asyncpg.Pool
) -> None:
    r = await client.get("/v1/maintenance/status")
    assert r.json() == {"state": "NORMAL", "since": None, "message": ""}
    bus = await EventBus.connect(
        gateway_env["JPU_NATS_URL"],
        stream=gateway_env["JPU_STREAM_NAME"],
        prefix=gateway_env["JPU_SUBJECT_PREFIX"],
    )
    try:
        seq = await bus.append(
            MaintenanceChanged(
                event_id=new_event_id(), ts=500.0, state="DRAINING", by="admin", message="NFS"
            )
        )
    finally:
        await bus.close()
    await wait_applied(pool, "maintenance", seq, timeout=15)
    r = await client.get("/v1/maintenance/status")
    assert r.json() == {"state": "DRAINING", "since": 500.0, "message": "NFS"}


async def test_A_me_reports_role_and_own_limit(
    client: httpx.AsyncClient, pool: asyncpg.Pool
) -> None:
    for role in auth.ROLES:
        ids = client.ids  # type: ignore[attr-defined]
        await ids.add_user(f"kdg-{role}", "KDG", role, max_active_jobs=7)
        token = await ids.create_token(f"kdg-{role}")
        me = (await client.get("/v1/me", headers=bearer(token=token))).json()
        assert (me["role"], me["lab"], me["max_active_jobs"]) == (role, "KDG", 7)
