"""PostgreSQL down under a serving gateway (SPEC O5): it stays ready, accepts submits and answers
what the log knows; the rest is 503 SERVICE_UNAVAILABLE with Retry-After in the SPEC §8 shape
naming the database, never a plain-text 500; and it all recovers when the database is back.

Real processes (`python -m jpu_services.intake`, `python -m jpu_services.gateway`) on the session
NATS and a PostgreSQL server of this module's own (stopped and started again on the same port;
the session server other tests share is never touched).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio

from jpu.bus import EventBus
from jpu.domain.states import PENDING
from jpu.embedded.base import free_port
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.events import NodeInventoryObserved, new_event_id
from jpu.store import create_pool, migrate
from jpu.testing.api import TOKENS, assert_error, bearer
from jpu.testing.nats_fixtures import unique_names
from jpu.tools.admin import seed_demo
from jpu.tools.identities import Identities
from jpu_services.gateway.routes._commands import READ_YOUR_WRITES_TIMEOUT_S

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}
BOB = {"Authorization": f"Bearer {TOKENS['bob']}"}


@pytest.fixture(scope="module")
def own_pg() -> Iterator[EmbeddedPostgres]:
    root = Path(tempfile.mkdtemp(prefix="jpu-test-pg-down-"))
    root.chmod(0o755)  # as root, postgres runs as `postgres` and must reach it
    server = EmbeddedPostgres(root / "pg", port=free_port(), durable=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest_asyncio.fixture
async def stack(
    own_pg: EmbeddedPostgres, nats_url: str, tmp_path: Path
) -> AsyncIterator[tuple[str, EventBus, subprocess.Popen[bytes]]]:
    """Intake and the gateway as processes on a fresh database and stream; (url, bus, gw)."""
    # a database of each test's own: the projections' positions belong to one stream
    dsn = own_pg.create_database(f"t_unavailable_{uuid.uuid4().hex[:12]}")
    pool = await create_pool(dsn)
    try:
        await migrate(pool)
    finally:
        await pool.close()
    stream, prefix = unique_names()
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix, name="pytest-pg-down")
    await bus.ensure_stream()
    await seed_demo(Identities(bus, None, time.time(), by="tests"))  # SEC3: events, folded later
    for node, tier in (("gpu-4090x2-01", "rtx4090"), ("gpu-3080tix2-01", "rtx3080ti")):
        await bus.append(
            NodeInventoryObserved(event_id=new_event_id(), ts=1.0, node=node, gpus={tier: 2})
        )
    port = free_port()
    env = {
        **os.environ,
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
        "JPU_GATEWAY_HOST": "127.0.0.1",
        "JPU_GATEWAY_PORT": str(port),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-P", "-m", f"jpu_services.{name}"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / f"{name}.log", "wb"),  # noqa: SIM115
        )
        for name in ("intake", "gateway")
    ]
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url) as c:
            for _ in range(300):
                with contextlib.suppress(httpx.TransportError):
                    # ready, and the projector has folded the demo users' identity events
                    me = await c.get("/v1/me", headers=bearer("alice"))
                    if (await c.get("/readyz")).status_code == 200 and me.status_code == 200:
                        break
                assert all(p.poll() is None for p in procs), _logs(tmp_path)
                await asyncio.sleep(0.2)
            else:
                pytest.fail("gateway not ready:\n" + _logs(tmp_path))
        yield url, bus, procs[1]
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        own_pg.start()  # the fixture's teardown needs it back (idempotent when it runs)
        await bus.delete_stream()
        await bus.close()


def _logs(tmp_path: Path) -> str:
    return "\n".join(
        f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}" for f in tmp_path.glob("*.log")
    )


async def test_O5_a_database_blip_is_not_an_outage(
    stack: tuple[str, EventBus, subprocess.Popen[bytes]], own_pg: EmbeddedPostgres
) -> None:
    """PostgreSQL stopped under a serving gateway (SPEC O5): it stays ready (degraded), accepts
    submits (intake and the log need no database), answers maintenance status and a job's own
    state from the log, says 503 naming the database with Retry-After for the rest, and once
    the database is back the projections catch up: nothing submitted meanwhile is lost."""
    url, bus, gateway = stack
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        body = {"command": "echo hi", "num_gpus": 1}
        r = await c.post("/v1/jobs", json=body, headers=ALICE)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

        own_pg.stop()
        await asyncio.sleep(1.5)  # past the gateway's token cache (1 s): auth asks the database
        before = await bus.last_seq()

        # what the gateway can do without the database
        assert (await c.get("/healthz")).json() == {"status": "ok"}
        ready = await c.get("/readyz?degraded=ok")
        assert ready.status_code == 200, ready.text  # stays in the load balancer's rotation
        assert ready.json()["status"] == "degraded" and ready.json()["bus"] == "ok"
        assert ready.json()["database"], ready.json()  # the database's error, named
        status = await c.get("/v1/maintenance/status")
        assert status.status_code == 200, status.text
        assert status.json()["state"] == "NORMAL"
        accepted = []
        for _ in range(3):
            t0 = time.monotonic()
            r = await c.post("/v1/jobs", json=body, headers=ALICE)
            took = time.monotonic() - t0
            print(f"submit while the database is away: {r.status_code} in {took:.3f} s")
            # the answer is intake's reply, not a read-your-writes wait run out
            assert took < READ_YOUR_WRITES_TIMEOUT_S, took
            assert r.status_code == 201, r.text  # intake's reply: in the log
            assert r.json()["state"] in ("PERSONAL_QUEUE_WAIT", "GLOBAL_QUEUE_WAIT"), r.json()
            accepted.append(r.json()["id"])
        assert await bus.last_seq() >= before + 3, "each submit appended its event"
        own = await c.get(f"/v1/jobs/{accepted[0]}", headers=ALICE)
        assert own.status_code == 200, own.text
        assert own.json()["from_log"] is True and own.json()["user"] == "bcg-alice"
        assert own.json()["state"] in PENDING, own.json()  # no dispatcher here: still waiting

        # what it cannot: 503 naming the database, with Retry-After, in the §8 shape
        requests = [
            ("GET", "/v1/me", None, ALICE),
            ("GET", "/v1/jobs", None, ALICE),
            ("POST", f"/v1/jobs/{job_id}/cancel", None, ALICE),
            ("GET", "/v1/labs", None, ALICE),
            ("GET", "/v1/placements", None, ALICE),
            ("GET", f"/v1/jobs/{job_id[:6]}", None, ALICE),  # a prefix needs the projection
            ("GET", "/v1/me", None, BOB),  # a token not seen lately cannot be checked: not a 401
        ]
        wrong = []
        for method, path, payload, who in requests:
            r = await c.request(method, path, json=payload, headers=who)
            try:
                err = assert_error(r, 503, "SERVICE_UNAVAILABLE")
                assert int(r.headers["retry-after"]) > 0
                assert "database" in err["details"]["dependency"], err
                assert "database" in err["message"], err
            except (AssertionError, KeyError, ValueError) as e:
                wrong.append(f"{method} {path}: {r.status_code} {r.text[:200]} ({e!r})")
        assert not wrong, "\n".join(wrong)
        assert gateway.poll() is None, "the gateway kept running"

        own_pg.start()  # same port: the pool reconnects, the projector catches up
        states: dict[str, str] = {}
        for _ in range(150):
            r = await c.get("/v1/jobs", headers=ALICE, params={"limit": 100})
            if r.status_code == 200:
                states = {j["id"]: j["state"] for j in r.json()["jobs"]}
                if set(accepted) <= set(states):
                    break
            await asyncio.sleep(0.2)
        assert set(accepted) | {job_id} <= set(states), (accepted, states)
        shown = await c.get(f"/v1/jobs/{accepted[0]}", headers=ALICE)
        assert shown.status_code == 200 and "from_log" not in shown.json(), shown.text
        assert (await c.get("/readyz")).json()["status"] == "ready"
        assert (await c.post("/v1/jobs", json=body, headers=ALICE)).status_code == 201


def _processes(pid: int) -> list[int]:
    """`pid` and all its descendants (the postmaster and its backends)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        with contextlib.suppress(OSError):
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
            todo += [int(k) for k in kids]
    return out


@contextlib.contextmanager
def frozen(server: EmbeddedPostgres) -> Iterator[None]:
    """The server hangs rather than refuses (a network partition, a stopped VM): every one of
    its processes SIGSTOPped, connections open and silent; SIGCONT after."""
    pid = int((server.pgdata / "postmaster.pid").read_text().split()[0])
    procs = _processes(pid)
    for p in procs:
        os.kill(p, signal.SIGSTOP)
    try:
        yield
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGCONT)


async def test_O5_a_hung_database_does_not_hang_submits(
    stack: tuple[str, EventBus, subprocess.Popen[bytes]], own_pg: EmbeddedPostgres
) -> None:
    """PostgreSQL frozen (SIGSTOP), not stopped: the submit path, readiness and maintenance
    status answer within their bounds instead of waiting on a silent connection."""
    url, _, gateway = stack
    body = {"command": "echo hi", "num_gpus": 1}
    async with httpx.AsyncClient(base_url=url, timeout=30) as c:
        r = await c.post("/v1/jobs", json=body, headers=ALICE)
        assert r.status_code == 201, r.text
        with frozen(own_pg):
            await asyncio.sleep(1.5)  # past the token cache: auth asks the database
            t0 = time.monotonic()
            r = await c.post("/v1/jobs", json=body, headers=ALICE)
            took = time.monotonic() - t0
            print(f"submit while the database hangs: {r.status_code} in {took:.3f} s")
            assert r.status_code == 201, r.text
            assert r.json()["state"] in ("PERSONAL_QUEUE_WAIT", "GLOBAL_QUEUE_WAIT"), r.json()
            assert took < 8.0, took  # auth's 3 s, then no read-your-writes wait
            accepted = r.json()["id"]
            t0 = time.monotonic()
            ready = await c.get("/readyz?degraded=ok")
            assert (ready.status_code, ready.json()["status"]) == (200, "degraded"), ready.text
            status = await c.get("/v1/maintenance/status")
            assert status.status_code == 200, status.text
            assert time.monotonic() - t0 < 6.0
        assert gateway.poll() is None
        for _ in range(150):  # thawed: the projection catches up, the job is listed
            r = await c.get(f"/v1/jobs/{accepted}", headers=ALICE)
            if r.status_code == 200 and "from_log" not in r.json():
                break
            await asyncio.sleep(0.2)
        assert r.status_code == 200 and "from_log" not in r.json(), r.text
