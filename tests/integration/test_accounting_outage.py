"""A charge published as NATS dies is retried with the same msg id and lands exactly once; the
accounting service waits for NATS instead of exiting, and its shutdown drain is bounded
(SPEC F5, O5, E2).

A real `python -m jpu_services.accounting` process talks to a NATS server of this module's own
through a TCP proxy of the test's. The proxy watches what the service sends; when the charge's
publish (`Nats-Msg-Id: chg-<JobEnded event_id>`) goes by, it cuts the connection — either before
the server sees the publish (`lost`), or after the server stored it but before the ack comes back
(`stored-ack-lost`) — and the test stops nats-server and starts it again on its store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.bus import EventBus
from jpu.bus.client import CLOSE_TIMEOUT_S
from jpu.embedded.nats import EmbeddedNats
from jpu.events import JobEnded, JobSubmitted, UsageCharged, new_event_id
from jpu.testing.nats_fixtures import unique_names

# SIGTERM → exit: run_workers' drain grace (10 s) + the bus close (drain, close: 2 × 5 s) + slack.
STOP_BOUND_S = 10 + 2 * CLOSE_TIMEOUT_S + 3


class CuttingProxy:
    """client ⇄ proxy ⇄ nats-server; cuts the connection that carries `needle` (once)."""

    def __init__(self, upstream_port: int, needle: bytes, mode: str) -> None:
        self.upstream_port, self.needle, self.mode = upstream_port, needle, mode
        self.tripped = asyncio.Event()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        try:
            ureader, uwriter = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:  # nats-server is down: so is the proxied connection
            cwriter.close()
            return
        mute = asyncio.Event()  # set: what the server sends no longer reaches the client

        async def up() -> None:
            tail = b""
            while data := await creader.read(65536):
                window = tail + data
                if not self.tripped.is_set() and self.needle in window:
                    self.tripped.set()
                    if self.mode == "stored-ack-lost":
                        mute.set()
                        uwriter.write(data)
                        await uwriter.drain()
                        await asyncio.sleep(0.5)  # stored; its ack goes nowhere
                    return
                uwriter.write(data)
                await uwriter.drain()
                tail = window[-len(self.needle) :]

        async def down() -> None:
            while data := await ureader.read(65536):
                if not mute.is_set():
                    cwriter.write(data)
                    await cwriter.drain()

        tasks = [asyncio.create_task(up()), asyncio.create_task(down())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            for w in (cwriter, uwriter):
                w.close()
            await asyncio.gather(*tasks, return_exceptions=True)


@pytest_asyncio.fixture
async def bus(own_nats: EmbeddedNats) -> AsyncIterator[EventBus]:
    stream, prefix = unique_names()
    b = await EventBus.connect(own_nats.url, stream=stream, prefix=prefix, name="pytest-outage")
    await b.ensure_stream()
    try:
        yield b
    finally:
        with contextlib.suppress(Exception):
            await b.delete_stream()
        await b.close()


def _job(job_id: str, t: float) -> list[JobSubmitted | JobEnded]:
    return [
        JobSubmitted(
            event_id=new_event_id(),
            ts=t,
            job_id=job_id,
            lab="BCG",
            user="bcg-alice",
            name="t",
            command="true",
            num_gpus=1,
        ),
        JobEnded(
            event_id=new_event_id(),
            ts=t + 60,
            job_id=job_id,
            attempt=1,
            state="COMPLETED",
            gpu_seconds_run=60.0,
            tflops=82.6,
            usage=60 * 82.6,
        ),
    ]


async def _charges(bus: EventBus) -> list[UsageCharged]:
    out = []
    async for d in bus.replay(filter_subject=f"{bus.prefix}.lab.>"):
        assert isinstance(d.event, UsageCharged)
        out.append(d.event)
    return out


async def _until(predicate, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


@pytest.mark.parametrize("mode", ["lost", "stored-ack-lost"])
async def test_F5_O5_charge_published_as_nats_dies_lands_once_and_accounting_stays_up(
    bus: EventBus, own_nats: EmbeddedNats, pg_dsn: str, tmp_path: Path, mode: str
) -> None:
    first = _job("job-outage-1", 1000.0)
    needle = f"chg-{first[1].event_id}".encode()
    proxy = CuttingProxy(own_nats.port, needle, mode)
    await proxy.start()
    heartbeat = tmp_path / "heartbeat"
    env = {
        **os.environ,
        "JPU_NATS_URL": f"nats://127.0.0.1:{proxy.port}",
        "JPU_DATABASE_URL": pg_dsn,
        "JPU_STREAM_NAME": bus.stream,
        "JPU_SUBJECT_PREFIX": bus.prefix,
        "JPU_HEARTBEAT_FILE": str(heartbeat),
    }
    log = tmp_path / "accounting.log"
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "jpu_services.accounting"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),  # noqa: SIM115
    )
    try:

        async def up() -> bool:
            assert proc.poll() is None, log.read_text()
            return heartbeat.exists()

        await _until(up, 60, "accounting to start")
        for e in first:
            await bus.append(e)
        await asyncio.wait_for(proxy.tripped.wait(), 30)  # the charge's publish went by: cut
        own_nats.stop()
        await asyncio.sleep(1.0)
        own_nats.start()  # same port, same store

        async def charged() -> bool:
            assert proc.poll() is None, "accounting exited:\n" + log.read_text()[-3000:]
            return bool(await _charges(bus))

        async def retried() -> bool:  # the unacknowledged publish timed out and was retried
            assert proc.poll() is None, "accounting exited:\n" + log.read_text()[-3000:]
            text = log.read_text()  # resent by append itself (an election) or by the charger
            return "append: no leader answered" in text or "append not acknowledged" in text

        await _until(charged, 60, "the charge after the NATS restart")
        await _until(retried, 60, "the retry of the unacknowledged charge")
        second = _job("job-outage-2", 2000.0)  # it goes on charging: past the first one
        for e in second:
            await bus.append(e)

        async def two() -> bool:
            return len(await _charges(bus)) >= 2

        await _until(two, 60, "the next charge")
        # accounting charges in log order: once a later job's charge is in, a duplicate of
        # either earlier charge would be too (a positive signal, not a pause)
        third = _job("job-outage-3", 3000.0)
        for e in third:
            await bus.append(e)

        async def three() -> bool:
            return len(await _charges(bus)) >= 3

        await _until(three, 60, "the charge of a later job")
        charges = await _charges(bus)  # each exactly once (F5)
        assert [c.event_id for c in charges] == [
            f"chg-{first[1].event_id}",
            f"chg-{second[1].event_id}",
            f"chg-{third[1].event_id}",
        ]
        assert charges[0].amount == 60 * 82.6
        assert charges[1].value_after > charges[0].value_after  # built on the first (F3)
        assert proc.poll() is None
        t0 = time.monotonic()  # SIGTERM: drains and exits 0, the bus drain bounded
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=40) == 0, log.read_text()[-3000:]
        assert time.monotonic() - t0 < STOP_BOUND_S, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        await proxy.close()


@pytest.mark.parametrize("outage", ["stopped", "frozen"])
async def test_finding4_bus_close_is_bounded_when_nats_is_gone(
    own_nats: EmbeddedNats, outage: str
) -> None:
    """nats-py's drain waits 30 s for a dead server, then 10 s for a flush; close() does not."""
    stream, prefix = unique_names()
    b = await EventBus.connect(own_nats.url, stream=stream, prefix=prefix, name="pytest-close")
    await b.ensure_stream()
    await b.nc.subscribe(f"{prefix}.x")  # something to drain
    proc = own_nats._proc
    assert proc is not None
    if outage == "stopped":
        own_nats.stop()
    else:
        proc.send_signal(signal.SIGSTOP)  # the TCP connection stays up; nothing answers
    try:
        t0 = time.monotonic()
        await b.close()
        elapsed = time.monotonic() - t0
        assert b.nc.is_closed
        assert elapsed < 2 * CLOSE_TIMEOUT_S + 1, elapsed
    finally:
        if outage == "frozen":
            proc.send_signal(signal.SIGCONT)
