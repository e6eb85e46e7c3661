"""Follower.wait_for (SPEC E2: a service sees its own appends before it decides on them): many
waiters at once, each woken once the fold has applied its seq, one that gives up removed."""

from __future__ import annotations

import asyncio

import pytest

from jpu.bus import EventBus
from jpu.bus.fold_follow import Follower
from jpu.config import load_config
from jpu.domain.cluster import ClusterState
from jpu.events import MaintenanceChanged, new_event_id


def _event(i: int) -> MaintenanceChanged:
    state = "DRAINING" if i % 2 else "ACTIVE"
    return MaintenanceChanged(event_id=new_event_id(), ts=float(i), state=state, by="root")


async def test_E2_wait_for_wakes_each_of_many_waiters_only_once_its_seq_is_folded(bus: EventBus):
    state = ClusterState.new(load_config(env={}), keep_ended=False)
    follower = Follower(bus, state)
    stop = asyncio.Event()
    run = asyncio.create_task(follower.run(stop))
    seen: dict[int, int] = {}

    async def waiter(seq: int) -> None:
        await follower.wait_for(seq, timeout=20.0)
        seen[seq] = state.seq  # what the fold had applied when this waiter woke

    try:
        waiters = [asyncio.create_task(waiter(s)) for s in range(60, 0, -1)]  # any order
        with pytest.raises(TimeoutError):  # nothing appended yet: it gives up
            await follower.wait_for(1, timeout=0.05)
        seqs = [await bus.append(_event(i)) for i in range(30)]
        seqs += await bus.append_many([_event(i) for i in range(30, 60)])  # folded in batches
        assert seqs == list(range(1, 61))
        await asyncio.wait_for(asyncio.gather(*waiters), 20.0)
        assert sorted(seen) == list(range(1, 61))
        assert all(applied >= seq for seq, applied in seen.items())
        await follower.wait_for(60, timeout=0.01)  # already folded: answers at once
        assert follower._waiters == []  # the one that gave up went once its seq was folded
    finally:
        stop.set()
        await asyncio.wait_for(run, 10.0)
