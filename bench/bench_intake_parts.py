"""The two costs intake pays per submit for every other submit in flight, each against the way
it was done before, alternating in one run (CPU of this process: steadier than wall time on a
shared machine).

    python bench/bench_intake_parts.py [--appends 4000] [--in-flight 64] [--rounds 3]

(a) CPU per `EventBus.append` with `--in-flight` appends outstanding, each with its expected last
    subject sequence (SPEC E2), on an embedded nats-server: the election ride for every append
    (the code before) vs the first try in the caller's task (`EventBus.append` now).
(b) CPU per folded seq of `Follower.wait_for` with W waiters, the fold advancing one seq per
    batch: an asyncio.Condition woken on every batch (before) vs the seq-keyed waiters (now).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import tempfile
import time
import types
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from jpu.bus import EventBus
from jpu.bus.election import ride_out_election, watch_of
from jpu.bus.fold_follow import Follower
from jpu.embedded.nats import EmbeddedNats
from jpu.events import JobPromoted, new_event_id


async def _ride(bus: EventBus, event: JobPromoted) -> int:
    """The append as it was: every try in its own task, waited on in a set."""
    return await ride_out_election(
        lambda try_s: bus._append_once(event, 0, None, try_s),
        "append",
        give_up=bus._closing,
        bounds_itself=True,
        watch=watch_of(bus.nc),
    )


async def _appends(bus: EventBus, how: str, n: int, in_flight: int) -> tuple[float, float]:
    slots = asyncio.Semaphore(in_flight)

    async def one() -> None:
        event = JobPromoted(
            event_id=new_event_id(), ts=1.0, job_id=uuid.uuid4().hex[:24], queue_entered_at=1.0
        )
        async with slots:
            if how == "now":
                await bus.append(event, expected_last_subject_seq=0)
            else:
                await _ride(bus, event)

    c0, w0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return (time.process_time() - c0) / n * 1e6, n / (time.perf_counter() - w0)


class _ConditionWaits:
    """Follower.wait_for as it was."""

    def __init__(self, state: types.SimpleNamespace) -> None:
        self.state, self.advanced = state, asyncio.Condition()

    async def wait_for(self, seq: int) -> None:
        async with self.advanced:
            await self.advanced.wait_for(lambda: self.state.seq >= seq)

    async def wake(self) -> None:
        async with self.advanced:
            self.advanced.notify_all()


async def _waits(how: str, waiters: int) -> float:
    state = types.SimpleNamespace(seq=0)
    wait: Callable[[int], Awaitable[None]]
    if how == "now":
        follower = Follower.__new__(Follower)  # only its waiters: no bus, no fold
        follower.state = state  # type: ignore[assignment]
        follower._waiters, follower._tickets = [], itertools.count()

        async def wake() -> None:
            follower._wake_waiters()

        wait = follower.wait_for
    else:
        before = _ConditionWaits(state)
        wake, wait = before.wake, before.wait_for
    tasks = [asyncio.create_task(wait(s)) for s in range(1, waiters + 1)]
    await asyncio.sleep(0)
    c0 = time.process_time()
    for s in range(1, waiters + 1):
        state.seq = s
        await wake()
        await asyncio.sleep(0)  # the woken waiters run
    await asyncio.gather(*tasks)
    return (time.process_time() - c0) * 1e6 / waiters


async def main(args: argparse.Namespace) -> None:
    server = EmbeddedNats(Path(tempfile.mkdtemp(prefix="bench-intake-")))
    url = server.start()
    try:
        bus = await EventBus.connect(url, stream="BENCH_INTAKE", prefix="benchintake")
        await bus.ensure_stream()
        for how in ("before", "now"):  # warm-up
            await _appends(bus, how, 500, args.in_flight)
        for r in range(1, args.rounds + 1):
            for how in ("before", "now"):
                us, rate = await _appends(bus, how, args.appends, args.in_flight)
                print(f"(a) round {r} {how:6s} {us:6.1f} µs CPU per append  {rate:6.0f}/s")
        await bus.close()
    finally:
        server.stop()
    for waiters in (32, 256):
        for r in range(1, args.rounds + 1):
            for how in ("before", "now"):
                us = await _waits(how, waiters)
                print(f"(b) W={waiters:<3d} round {r} {how:6s} {us:6.1f} µs CPU per folded seq")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--appends", type=int, default=4000)
    ap.add_argument("--in-flight", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(ap.parse_args()))
