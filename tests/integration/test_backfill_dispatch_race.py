"""The dispatcher/backfill race on one GPU, made to happen on purpose (SPEC B2, B4, E2).

The two writers append on different subjects (`job.<id>`, `backfill.<node>`), so no expected
sequence orders them: a dispatch can reach the log while the backfill service is launching an
instance on the same GPU. Real NATS JetStream, the real backfill service on the real local
backend (the stub LLM); the race is forced by appending the dispatch from inside the launch or
just before the service's own BackfillStarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jpu.backends.backfill_contract import BackfillHandle, BackfillSpec
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.backends.local.stop import terminate_all
from jpu.bus import EventBus
from jpu.config import Config
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    Event,
    JobDispatched,
    JobPromoted,
    JobSubmitted,
)
from jpu.runtime.clock import SystemClock
from jpu.testing.stack import NODE, TIER, _config
from jpu_services.backfill.service import BackfillOptions, BackfillService

JOB = "race-job"


def dispatch(ts: float) -> JobDispatched:  # the research job takes both GPUs (B4)
    return JobDispatched(
        event_id="race-dispatch", ts=ts, job_id=JOB, attempt=1, node=NODE, tier=TIER, gpus=[0, 1]
    )


async def queue_job(bus: EventBus, ts: float) -> None:
    submit = JobSubmitted(
        event_id="race-submit", ts=ts, job_id=JOB, lab="BCG", user="bcg-alice", name="t",
        command="sleep 30", num_gpus=2,
    )  # fmt: skip
    await bus.append(submit)
    await bus.append(JobPromoted(event_id="race-promote", ts=ts, job_id=JOB, queue_entered_at=ts))


class RacingBackend(LocalBackend):
    """The real local backend; `during_launch` runs once, after the first instance spawned."""

    during_launch: Callable[[], Any] | None = None
    launched: list[BackfillHandle]

    async def submit_backfill(self, spec: BackfillSpec) -> BackfillHandle:
        handle = await super().submit_backfill(spec)
        self.launched.append(handle)
        hook, self.during_launch = self.during_launch, None
        if hook is not None:
            await hook()
        return handle


class DispatchFirstBus(EventBus):
    """The real bus; the dispatch lands just before the service's first BackfillStarted."""

    raced = False

    async def append(self, event: Event, **kw: Any) -> int:
        if isinstance(event, BackfillStarted) and not self.raced:
            self.raced = True
            await super().append(dispatch(event.ts))
        return await super().append(event, **kw)


@dataclass
class Race:
    config: Config
    bus: EventBus
    backend: RacingBackend
    service: BackfillService
    task: asyncio.Task[None]

    async def rounds(self, n: int = 2) -> None:
        """Until the service has begun `n` more rounds (one whole round on the log as it is now):
        what proves "nothing more started", not a pause."""
        target = self.service.stats.rounds + n

        async def done() -> bool:
            return self.service.stats.rounds >= target

        await self.until(done)

    async def events(self, *types: type[Event]) -> list[Any]:
        return [d.event async for d in self.bus.replay() if isinstance(d.event, types)]

    async def until(self, pred: Callable[[], Any], timeout: float = 15.0) -> None:
        async def poll() -> None:
            while not await pred():
                assert not self.task.done(), self.task.exception()  # the service must live
                await asyncio.sleep(0.05)

        await asyncio.wait_for(poll(), timeout)


@contextlib.asynccontextmanager
async def racing(
    nats_url: str, pg_dsn: str, bus_class: type[EventBus] = EventBus
) -> AsyncIterator[Race]:
    data_dir = Path(tempfile.mkdtemp(prefix="jpu-race-", dir="/tmp"))
    config = _config(nats_url, pg_dsn, data_dir)
    bus = await bus_class.connect(
        config.nats_url, stream=config.stream_name, prefix=config.subject_prefix
    )
    await bus.ensure_stream()
    backend = RacingBackend(LocalSettings(data_dir=data_dir, nodes=list(config.nodes)))
    backend.launched = []
    options = BackfillOptions(
        command=config.backfill_command, settle_s=config.backfill_settle_s, grace_s=1.0, poll_s=0.1
    )
    service = BackfillService(bus, config, backend, SystemClock(), options)
    stop = asyncio.Event()
    await queue_job(bus, SystemClock().now())
    task = asyncio.create_task(service.run(stop))
    try:
        yield Race(config, bus, backend, service, task)
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10)
        await backend.close()
        await asyncio.to_thread(terminate_all, data_dir, 2.0)
        await bus.delete_stream()
        await bus.close()
        shutil.rmtree(data_dir, ignore_errors=True)


async def test_B2_dispatch_folded_during_a_launch_wins_the_gpu(nats_url: str, pg_dsn: str) -> None:
    """The dispatch is in the log and folded while the first instance spawns: the service
    records no start on either GPU (the log gave them to the job first), stops the instance it
    launched for nothing, and keeps running (it used to crash on the second GPU: KeyError)."""
    async with racing(nats_url, pg_dsn) as r:

        async def dispatch_now() -> None:
            seq = await r.bus.append(dispatch(SystemClock().now()))
            await r.service.follower.wait_for(seq)  # the service's fold has applied it

        r.backend.during_launch = dispatch_now

        async def launched_one_and_stopped_it() -> bool:
            if not r.backend.launched:
                return False
            (first,) = r.backend.launched  # nothing launched on the second GPU
            return (await r.backend.poll_backfill(first.backend_job_id)).terminal

        await r.until(launched_one_and_stopped_it)
        assert not await r.events(BackfillStarted, BackfillEnded)  # no backfill on held GPUs
        assert not r.service.state.backfill
        held = {(NODE, TIER, 0): f"job:{JOB}", (NODE, TIER, 1): f"job:{JOB}"}
        assert r.service.state.holders == held
        await r.rounds()  # later rounds: nothing more starts, the service lives
        assert not r.task.done() and not await r.events(BackfillStarted)
        assert len(r.backend.launched) == 1


async def test_B2_backfill_started_after_the_dispatch_in_log_order_is_preempted_at_once(
    nats_url: str, pg_dsn: str
) -> None:
    """The dispatch lands between the service's last check and its BackfillStarted: in log
    order the start comes second, on a GPU a job holds; the service stops it at once and
    records BackfillEnded(preempted), so the GPU is the job's alone and nothing is lost."""
    async with racing(nats_url, pg_dsn, DispatchFirstBus) as r:

        async def preempted() -> bool:
            return bool(await r.events(BackfillEnded))

        await r.until(preempted)
        log = await r.events(JobDispatched, BackfillStarted, BackfillEnded)
        assert [type(e) for e in log] == [JobDispatched, BackfillStarted, BackfillEnded]
        start, end = log[1], log[2]
        assert end.backfill_id == start.backfill_id and end.reason == "preempted"
        status = await r.backend.poll_backfill(start.backend_job_id)
        assert status.terminal  # the instance is gone, not only recorded as gone
        await r.rounds()
        assert not r.task.done() and not r.service.state.backfill
        assert len(await r.events(BackfillStarted)) == 1  # no start on the other held GPU
