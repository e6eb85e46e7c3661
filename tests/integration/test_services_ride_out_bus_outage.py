"""Every service as a real process rides out the bus being away (SPEC O3, O5; issue 29 item 2,
issue 34 item 2): started while NATS is down — as after a SIGKILL during a leader election — each
waits and retries its start instead of exiting, then does its work once NATS is back; and NATS
stopped and restarted under the running services leaves every one of them running."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import pytest_asyncio

from jpu.bus import EventBus
from jpu.commands import SubmitCommand, decode_reply, encode, submit_subject
from jpu.embedded.base import free_port
from jpu.embedded.nats import EmbeddedNats, _accepts, find_nats_server
from jpu.events import JobDispatched
from jpu.testing.crash import KillablePostgres
from jpu.testing.nats_cluster import stream_leader, wait_jetstream
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.servers import NatsServers
from jpu.testing.stack_process import world_searchable_tmpdir

WORKERS = ("intake", "dispatcher", "slurm_agent", "accounting", "backfill", "notifier")
BODY = {"name": "train", "command": "python train.py", "num_gpus": 1}


@dataclass
class Service:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    heartbeat: Path | None  # None: the gateway, healthy when /healthz answers

    def assert_running(self) -> None:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{tail}")


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(tmp_path / "nats", port=free_port())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def own_pg() -> Iterator[KillablePostgres]:
    """A PostgreSQL of this test's own, to stop and start (on the same port)."""
    root = world_searchable_tmpdir("jpu-resil-pg-")
    server = KillablePostgres(root / "pg", port=free_port(), durable=False)
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Platform:
    nats_url: str
    env: dict[str, str]
    dir: Path
    gateway: str
    services: list[Service]

    def spawn_all(self) -> None:
        for name in (*WORKERS, "gateway"):
            log = self.dir / f"{name}.log"
            beat = None if name == "gateway" else self.dir / f"{name}.beat"
            env = {**self.env, **({"JPU_HEARTBEAT_FILE": str(beat)} if beat else {})}
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", f"jpu_services.{name}"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(log, "wb"),  # noqa: SIM115
            )
            self.services.append(Service(name, proc, log, beat))

    def assert_all_running(self) -> None:
        for s in self.services:
            s.assert_running()

    async def until_all_up(self, timeout: float) -> None:
        """Every worker's heartbeat file (written once it is connected) and the gateway's
        /healthz; any service exiting meanwhile fails the test with its log."""
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient(timeout=2.0) as http:
            while True:
                self.assert_all_running()
                beats = all(s.heartbeat.exists() for s in self.services if s.heartbeat)
                with contextlib.suppress(httpx.HTTPError):
                    if beats and (await http.get(f"{self.gateway}/healthz")).status_code == 200:
                        return
                if time.monotonic() > deadline:
                    down = [s.name for s in self.services if s.heartbeat and s.heartbeat.exists()]
                    pytest.fail(f"not up after {timeout} s; up: {down}")
                await asyncio.sleep(0.3)

    async def until_each_logged(
        self, text: str, timeout: float, only: tuple[str, ...] | None = None
    ) -> None:
        """Every service's log (or those `only` names) has `text` (a start on a loaded machine
        takes seconds of imports: the outage must be seen by each service, not just happen
        meanwhile)."""
        deadline = time.monotonic() + timeout
        while True:
            self.assert_all_running()
            logs = {
                s.name: s.log.read_text(errors="replace")
                for s in self.services
                if only is None or s.name in only
            }
            missing = [name for name, log in logs.items() if text not in log]
            if not missing:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"{missing} did not log {text!r} in {timeout} s")
            await asyncio.sleep(0.3)

    def stop_all(self) -> dict[str, int | None]:
        for s in self.services:
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        for s in self.services:
            try:
                codes[s.name] = s.proc.wait(20)
            except subprocess.TimeoutExpired:
                s.proc.kill()
                codes[s.name] = s.proc.wait()
        return codes


@contextlib.asynccontextmanager
async def platform_on(
    nats_url: str, dsn: str, tmp_path: Path, **extra: str
) -> AsyncIterator[Platform]:
    stream, prefix = unique_names()
    port = free_port()
    env = {
        **os.environ,
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
        "JPU_DATA_DIR": str(tmp_path / "data"),
        "JPU_GATEWAY_HOST": "127.0.0.1",
        "JPU_GATEWAY_PORT": str(port),
        "JPU_CYCLE_S": "0.5",
        "JPU_MIN_CYCLE_GAP_S": "0.05",
        "JPU_LOG_LEVEL": "INFO",
        **extra,
    }
    p = Platform(nats_url, env, tmp_path, f"http://127.0.0.1:{port}", [])
    try:
        yield p
    finally:
        p.stop_all()


@pytest_asyncio.fixture
async def platform(own_nats: EmbeddedNats, pg_dsn: str, tmp_path: Path) -> AsyncIterator[Platform]:
    async with platform_on(own_nats.url, pg_dsn, tmp_path) as p:
        yield p


async def submit_and_dispatch(
    nats_url: str, env: dict[str, str], user: str, dispatched: bool = True
) -> str:
    """A submit accepted by intake and (`dispatched`) dispatched by the dispatcher, through
    the log; the job's id."""
    bus = await EventBus.connect(
        nats_url, stream=env["JPU_STREAM_NAME"], prefix=env["JPU_SUBJECT_PREFIX"], name="pytest"
    )
    try:
        cmd = encode(SubmitCommand(user=user, lab="BCG", body=BODY))
        job_id = None
        deadline = time.monotonic() + 30
        while job_id is None:
            try:
                reply = decode_reply(
                    (await bus.nc.request(submit_subject(bus.prefix), cmd, timeout=2)).data
                )
                assert reply.status == 201, reply
                job_id = reply.job_id
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        while dispatched:
            done = [
                d.event.job_id async for d in bus.replay() if isinstance(d.event, JobDispatched)
            ]
            if job_id in done:
                break
            assert time.monotonic() < deadline, f"{job_id} not dispatched"
            await asyncio.sleep(0.3)
        return str(job_id)
    finally:
        await bus.close()


async def until_dispatched(nats_url: str, env: dict[str, str], job_id: str) -> None:
    bus = await EventBus.connect(
        nats_url, stream=env["JPU_STREAM_NAME"], prefix=env["JPU_SUBJECT_PREFIX"], name="pytest"
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            events = await bus.job_events(job_id)
            if any(isinstance(d.event, JobDispatched) for d in events):
                return
            assert time.monotonic() < deadline, f"{job_id} not dispatched: {events}"
            await asyncio.sleep(0.3)
    finally:
        await bus.close()


@contextlib.contextmanager
def nats_without_jetstream(port: int) -> Iterator[None]:
    """A server that accepts clients but whose JetStream does not answer — what a service meets
    during a leader election or while JetStream recovers after a restart: the connect succeeds,
    `ensure_stream`'s stream_info gets no responders."""
    proc = subprocess.Popen(
        [find_nats_server(), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not _accepts("127.0.0.1", port):
            assert time.monotonic() < deadline, "nats-server did not start"
            time.sleep(0.05)
        yield
    finally:
        proc.terminate()
        proc.wait(10)


async def test_O5_every_service_started_while_the_bus_is_away_waits_and_then_works(
    platform: Platform, own_nats: EmbeddedNats
) -> None:
    # Each service is (re)started while the bus is away: first nothing listens at all (each
    # one's connect is refused, again and again)...
    platform.spawn_all()
    await platform.until_each_logged("NATS error: [Errno 111]", 60)
    # ...then the server answers but JetStream does not (an election): before, the bootstrap's
    # stream_info failed here and the service exited 1; now each one logs its retry and waits
    with nats_without_jetstream(own_nats.port):
        await platform.until_each_logged("the event stream unavailable; retrying", 40)
        await asyncio.sleep(1.0)
        platform.assert_all_running()
    own_nats.start()
    await platform.until_all_up(40)
    await submit_and_dispatch(own_nats.url, platform.env, "alice")
    platform.assert_all_running()
    codes = platform.stop_all()
    assert codes == dict.fromkeys((*WORKERS, "gateway"), 0)


async def test_O5_every_service_keeps_running_through_a_restart_of_the_bus(
    platform: Platform, own_nats: EmbeddedNats
) -> None:
    own_nats.start()
    platform.spawn_all()
    await platform.until_all_up(40)
    await submit_and_dispatch(own_nats.url, platform.env, "alice")
    own_nats.stop()  # a restart of the bus: same port, same store
    await asyncio.sleep(3.0)
    platform.assert_all_running()
    own_nats.start()
    await submit_and_dispatch(own_nats.url, platform.env, "bob")
    await asyncio.sleep(1.0)
    platform.assert_all_running()
    codes = platform.stop_all()
    assert codes == dict.fromkeys((*WORKERS, "gateway"), 0)


async def test_O5_every_service_starts_and_keeps_running_through_a_postgresql_outage(
    own_nats: EmbeddedNats, own_pg: KillablePostgres, tmp_path: Path
) -> None:
    own_nats.start()
    own_pg.start()  # initdb and the database, as a deployment has them; then a restart
    own_pg.stop()
    async with platform_on(own_nats.url, own_pg.dsn(), tmp_path) as platform:
        # started while the database is away: each worker that needs it waits (the notifier
        # used to exit); the gateway and intake, which need it for nothing a submit needs,
        # serve: the gateway ready (degraded) with maintenance status from the log, intake
        # accepting a submit into the log
        platform.spawn_all()
        waiting = tuple(w for w in WORKERS if w != "intake")
        await platform.until_each_logged("PostgreSQL unavailable; retrying", 60, waiting)
        await platform.until_each_logged("migrations unavailable; retrying", 60, ("gateway",))
        async with httpx.AsyncClient(timeout=5.0) as http:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(httpx.TransportError):
                    ready = await http.get(f"{platform.gateway}/readyz?degraded=ok")
                    if ready.status_code == 200:
                        break
                assert time.monotonic() < deadline, "the gateway did not serve without PG"
                platform.assert_all_running()
                await asyncio.sleep(0.3)
            assert ready.json()["status"] == "degraded", ready.text
            status = await http.get(f"{platform.gateway}/v1/maintenance/status")
            assert (status.status_code, status.json()["state"]) == (200, "NORMAL"), status.text
        early = await submit_and_dispatch(own_nats.url, platform.env, "carol", dispatched=False)
        platform.assert_all_running()
        await asyncio.to_thread(own_pg.start)
        await platform.until_all_up(40)
        await submit_and_dispatch(own_nats.url, platform.env, "alice")
        await until_dispatched(own_nats.url, platform.env, early)  # accepted before: not lost
        own_pg.stop()  # a restart of the database: same port, same data
        await asyncio.sleep(4.0)
        platform.assert_all_running()
        async with httpx.AsyncClient(timeout=5.0) as http:
            assert (await http.get(f"{platform.gateway}/healthz")).status_code == 200
            ready = await http.get(f"{platform.gateway}/readyz?degraded=ok")  # still in rotation
            assert (ready.status_code, ready.json()["status"]) == (200, "degraded"), ready.text
            own_pg.start()
            await submit_and_dispatch(own_nats.url, platform.env, "bob")
            await platform.until_all_up(20)
            deadline = time.monotonic() + 20  # the gateway's pool answers again
            while (await http.get(f"{platform.gateway}/readyz")).status_code != 200:
                assert time.monotonic() < deadline, "the gateway never got its database back"
                await asyncio.sleep(0.3)
        platform.assert_all_running()
        codes = platform.stop_all()
    assert codes == dict.fromkeys((*WORKERS, "gateway"), 0)


def test_O5_a_configuration_error_still_fails_the_start_clearly(
    nats_url: str, pg_server_dsn: str, tmp_path: Path
) -> None:
    """Not an outage: a database that does not exist is a verdict no retry changes, so the
    service exits 1 at once and says why (it does not wait forever)."""
    stream, prefix = unique_names()
    dsn = urlsplit(pg_server_dsn)  # its query (the password file, SEC2) kept
    missing = urlunsplit(dsn._replace(path="/no_such_database_" + prefix))
    env = {
        **os.environ,
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": missing,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
    }
    run = subprocess.run(
        [sys.executable, "-P", "-m", "jpu_services.intake"],
        env=env,
        capture_output=True,
        timeout=50,
    )
    assert run.returncode == 1
    err = run.stderr.decode(errors="replace")
    assert "InvalidCatalogNameError" in err and "no_such_database_" in err, err[-2000:]
    assert "retrying" not in err


async def test_O3_O5_every_service_restarted_during_a_leader_election_starts(
    nats_cluster: NatsServers, pg_dsn: str, tmp_path: Path
) -> None:
    """The hidden run of issue 29: services (re)started while the servers elect a new leader
    for the stream — each one's bootstrap (`ensure_stream` → stream_info) meets timeouts and
    503s, waits instead of exiting 1, and then the platform works."""
    await wait_jetstream(nats_cluster.urls)
    async with platform_on(
        nats_cluster.urls, pg_dsn, tmp_path, JPU_STREAM_REPLICAS="3"
    ) as platform:
        env = platform.env
        bus = await EventBus.connect(
            nats_cluster.urls,
            stream=env["JPU_STREAM_NAME"],
            prefix=env["JPU_SUBJECT_PREFIX"],
            replicas=3,  # as the services make it (JPU_STREAM_REPLICAS)
        )
        try:
            await bus.ensure_stream()
            leader = await stream_leader(bus.js, env["JPU_STREAM_NAME"])
        finally:
            await bus.close()
        # The leader's node SIGKILLed, and a second node with it: no quorum, so the election
        # lasts until that node is back — long enough for every service (seconds of imports
        # each, on a loaded machine) to meet it in its bootstrap.
        other = next(n for n in ("n1", "n2", "n3") if n != leader)
        nats_cluster.kill(leader)
        nats_cluster.kill(other)
        platform.spawn_all()
        await platform.until_each_logged("the event stream unavailable; retrying", 60)
        await asyncio.to_thread(nats_cluster.node(other).start)
        await platform.until_all_up(60)
        await submit_and_dispatch(nats_cluster.urls, env, "alice")
        platform.assert_all_running()
        codes = platform.stop_all()
    assert codes == dict.fromkeys((*WORKERS, "gateway"), 0)


def test_O5_a_sigterm_while_a_start_waits_for_the_bus_is_a_graceful_stop(
    pg_dsn: str, tmp_path: Path
) -> None:
    """Waiting for NATS forever must not make a service unstoppable: SIGTERM → exit 0."""
    stream, prefix = unique_names()
    env = {
        **os.environ,
        "JPU_NATS_URL": f"nats://127.0.0.1:{free_port()}",  # nothing listens there
        "JPU_DATABASE_URL": pg_dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
    }
    log = tmp_path / "notifier.log"
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "jpu_services.notifier"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),  # noqa: SIM115
    )
    try:
        deadline = time.monotonic() + 40
        while "NATS error" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "the notifier never tried to connect"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0, log.read_text(errors="replace")[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
