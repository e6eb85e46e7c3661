"""jpu.store: migrations, exactly-once apply (SPEC E3), read-your-writes."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from jpu.bus.model import Delivered
from jpu.events import JobPromoted, JobSubmitted, UsageCharged, new_event_id, subject_for
from jpu.store import (
    apply_batch,
    create_pool,
    last_applied,
    migrate,
    migration_files,
    wait_applied,
)
from jpu.store.projections import jobs, lab_usage


def _d(seq: int, event) -> Delivered:
    return Delivered(seq, subject_for(event), event, {})


def _submitted(job_id: str, ts: float = 1.0) -> JobSubmitted:
    return JobSubmitted(
        event_id=new_event_id(),
        ts=ts,
        job_id=job_id,
        lab="BCG",
        user="alice",
        name="train",
        command="python train.py",
        num_gpus=1,
    )


def _charge(seq_value: float, ts: float) -> UsageCharged:
    return UsageCharged(
        event_id=new_event_id(),
        ts=ts,
        lab="BCG",
        amount=10.0,
        value_after=seq_value,
        as_of=ts,
        job_id="j1",
    )


async def test_migrate_is_idempotent_and_concurrent_safe(pg_dsn: str) -> None:
    pools = [await create_pool(pg_dsn, max_size=2) for _ in range(4)]
    try:
        results = await asyncio.gather(*(migrate(p) for p in pools))
        names = [p.name for p in migration_files()]
        # exactly one caller applied each migration; the others found them done
        assert sorted(n for r in results for n in r) == sorted(names)
        assert "0001_core.sql" in names
        assert await migrate(pools[0]) == []
        versions = await pools[0].fetch("SELECT version FROM schema_migrations ORDER BY 1")
        assert [r["version"] for r in versions] == sorted(names)
    finally:
        for p in pools:
            await p.close()


async def test_E3_same_event_delivered_twice_changes_projection_once(pool: asyncpg.Pool) -> None:
    batch = [
        _d(1, _submitted("j1")),
        _d(2, JobPromoted(event_id=new_event_id(), ts=2.0, job_id="j1", queue_entered_at=2.0)),
        _d(3, _charge(10.0, 3.0)),
    ]
    assert await apply_batch(pool, jobs.projection, batch) == 3
    before = await pool.fetchrow("SELECT * FROM jobs WHERE job_id = 'j1'")
    assert before["usage_charged"] == 10.0 and before["state"] == "GLOBAL_QUEUE_WAIT"

    # the whole batch again (a redelivery after a crash before the ack): nothing happens
    assert await apply_batch(pool, jobs.projection, batch) == 0
    # an overlapping batch: only the new event is applied
    overlap = [*batch[1:], _d(5, _charge(20.0, 5.0))]
    assert await apply_batch(pool, jobs.projection, overlap) == 1
    # a duplicate inside one batch counts once
    assert await apply_batch(pool, jobs.projection, [_d(6, _charge(30.0, 6.0))] * 2) == 1

    after = await pool.fetchrow("SELECT * FROM jobs WHERE job_id = 'j1'")
    assert after["usage_charged"] == 30.0  # 10 + 10 + 10: each charge exactly once
    assert after["updated_seq"] == 6
    assert await last_applied(pool, "jobs") == 6
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 1


async def test_E3_positions_are_per_projection(pool: asyncpg.Pool) -> None:
    batch = [_d(7, _charge(10.0, 1.0))]
    assert await apply_batch(pool, lab_usage.projection, batch) == 1
    assert await last_applied(pool, "lab_usage") == 7
    assert await last_applied(pool, "jobs") == 0
    assert await apply_batch(pool, jobs.projection, batch) == 1  # no job row: a no-op, tracked
    assert await last_applied(pool, "jobs") == 7


async def test_E3_concurrent_appliers_apply_each_event_once(pool: asyncpg.Pool) -> None:
    """Two projector instances given the same events serialise on the tracking row."""
    batch = [_d(1, _submitted("j1")), *(_d(s, _charge(10.0 * s, s)) for s in range(2, 40))]
    counts = await asyncio.gather(*(apply_batch(pool, jobs.projection, batch) for _ in range(3)))
    assert sorted(counts) == [0, 0, 39]
    assert await pool.fetchval("SELECT usage_charged FROM jobs") == pytest.approx(380.0)


async def test_wait_applied_read_your_writes(pool: asyncpg.Pool) -> None:
    with pytest.raises(TimeoutError):
        await wait_applied(pool, "jobs", 1, timeout=0.1)

    async def later() -> None:
        await asyncio.sleep(0.1)
        await apply_batch(
            pool, jobs.projection, [_d(1, _submitted("j1")), _d(2, _charge(1.0, 2.0))]
        )

    task = asyncio.create_task(later())
    await wait_applied(pool, "jobs", 2, timeout=5.0)
    # the write is visible the moment wait_applied returns
    assert await pool.fetchval("SELECT state FROM jobs WHERE job_id = 'j1'") is not None
    await task
    await wait_applied(pool, "jobs", 1, timeout=0.01)  # already past: returns at once
