"""Read-your-writes through LISTEN/NOTIFY (jpu.store.positions) on a real PostgreSQL (SPEC E3).

The gateway answers a submit only once the jobs projection applied the command's event; these
tests check the wait wakes on the projection's commit, sees positions reached before it started,
times out, and keeps working (by polling) when its listener connection is gone.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

import asyncpg
import pytest

from jpu.store.positions import PositionWatch
from jpu.store.projection import _lock_positions, _save_positions


async def commit_position(pool: asyncpg.Pool, name: str, seq: int) -> None:
    """What a projection's batch commit does to its tracking row (and its NOTIFY)."""
    async with pool.acquire() as proxy, proxy.transaction():
        conn = cast(asyncpg.Connection, proxy)
        before = await _lock_positions(conn, [name])
        await _save_positions(conn, before, {name: seq})


async def test_E3_wait_wakes_on_the_projection_commit(pool: asyncpg.Pool, pg_dsn: str) -> None:
    watch = await PositionWatch.start(pg_dsn, recheck_s=30.0)  # only a NOTIFY can wake it
    try:
        await commit_position(pool, "jobs", 1)
        waiting = asyncio.create_task(watch.wait(pool, "jobs", 3, timeout=10.0))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        t0 = time.monotonic()
        await commit_position(pool, "jobs", 3)
        await asyncio.wait_for(waiting, 5.0)
        assert time.monotonic() - t0 < 2.0
        assert watch.known["jobs"] == 3
    finally:
        await watch.close()


async def test_E3_position_reached_before_the_wait_returns_at_once(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    await commit_position(pool, "maintenance", 7)  # before anyone listened
    watch = await PositionWatch.start(pg_dsn)
    try:
        await asyncio.wait_for(watch.wait(pool, "maintenance", 7, timeout=5.0), 1.0)
    finally:
        await watch.close()


async def test_E3_wait_times_out_when_the_position_is_not_reached(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    watch = await PositionWatch.start(pg_dsn, recheck_s=0.05)
    try:
        await commit_position(pool, "jobs", 1)
        with pytest.raises(TimeoutError):
            await watch.wait(pool, "jobs", 2, timeout=0.3)
        assert watch._waiters["jobs"] == []  # a timed-out waiter is not left behind
    finally:
        await watch.close()


async def test_E3_wait_polls_when_the_listener_connection_is_gone(
    pool: asyncpg.Pool, pg_dsn: str
) -> None:
    watch = await PositionWatch.start(pg_dsn)
    await watch.close()
    waiting = asyncio.create_task(watch.wait(pool, "jobs", 2, timeout=5.0))
    await asyncio.sleep(0.05)
    await commit_position(pool, "jobs", 2)
    await asyncio.wait_for(waiting, 3.0)
