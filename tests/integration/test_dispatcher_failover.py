"""Exactly one active dispatcher: leader lease, takeover, no double dispatch (SPEC E4, O5)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import msgspec

from jpu.bus import EventBus
from jpu.config import load_config
from jpu.events import JobDispatched
from jpu.runtime.clock import FakeClock
from jpu.testing.fold import Watcher, end_job, job_id, start_job, submit_global
from jpu_services.dispatcher.service import DispatcherStats, run_dispatcher


async def dispatched_per_attempt(bus: EventBus) -> Counter:
    return Counter(
        [
            (d.event.job_id, d.event.attempt)
            async for d in bus.replay()
            if isinstance(d.event, JobDispatched)
        ]
    )


async def kill(task: asyncio.Task) -> None:
    """Cancel until it is gone: Python 3.11's wait_for (inside nats-py) can swallow one cancel."""
    while not task.done():
        task.cancel()
        await asyncio.sleep(0.01)


async def test_E4_only_the_leader_acts_and_the_standby_takes_over(bus: EventBus):
    config = msgspec.structs.replace(load_config(env={}), cycle_s=0.3, min_cycle_gap_s=0.02)
    clock = FakeClock(100.0)
    stats = [DispatcherStats(), DispatcherStats()]
    stops = [asyncio.Event(), asyncio.Event()]
    tasks = [
        asyncio.create_task(
            run_dispatcher(bus, config, clock, stops[i], holder=f"d{i}", stats=stats[i])
        )
        for i in range(2)
    ]
    try:
        async with Watcher(bus, config) as w:
            await w.until(lambda s: any(st.leader for st in stats))
            leader = 0 if stats[0].leader else 1
            standby = 1 - leader
            jobs = [job_id() for _ in range(4)]
            for j in jobs:
                await submit_global(bus, clock, j, "BCG", "alice", 1)
            await w.until(lambda s: all(s.jobs.get(j) and s.jobs[j].placement for j in jobs))
            # the standby saw the same events; it must not have acted while the leader went on
            # to cycle twice more on them (a positive signal, not a pause)
            after = stats[leader].cycles
            await w.until(lambda s: stats[leader].cycles >= after + 2)
            assert stats[standby].appended == 0 and stats[standby].cycles == 0
            assert stats[leader].appended > 0
            # the leader dies while work is pending; the standby takes over within seconds
            more = [job_id() for _ in range(6)]
            for j in more[:3]:
                await submit_global(bus, clock, j, "KDG", "carol", 1)
            await kill(tasks[leader])
            killed = time.monotonic()
            for j in more[3:]:
                await submit_global(bus, clock, j, "KDG", "dave", 1)
            await w.until(lambda s: stats[standby].leader, timeout=8)
            takeover = time.monotonic() - killed
            # free GPUs so all the queued jobs can run; the new leader dispatches them
            for j in jobs:
                await start_job(bus, w.state, clock, j)
            await w.until(lambda s: all(s.jobs[j].state == "RUNNING" for j in jobs))
            clock.advance(60)
            for j in jobs:
                await end_job(bus, w.state, config, clock, j)
            await w.until(lambda s: all(s.jobs[j].placement for j in more), timeout=10)
            assert takeover < 5.0, takeover
        counts = await dispatched_per_attempt(bus)
        assert set(counts) == {(j, 1) for j in jobs + more}
        assert max(counts.values()) == 1  # never dispatched twice
    finally:
        for s in stops:
            s.set()
        await asyncio.gather(*tasks, return_exceptions=True)
