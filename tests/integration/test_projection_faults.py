"""SPEC E3 + E6, O5 (the other way round): an event a projection cannot apply is
an alarm, never a silent park. The runner retries it, then records it in `projection_faults`
(in the transaction that moves past it), every other event and every other projection goes on,
/readyz says "degraded", and a rebuild or `jpu.tools.replay` reports it instead of crashing.

Intake refuses what the database cannot store, so the poison here is appended to the log
directly, as an older version of the platform could have done.
"""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg

from jpu.bus import EventBus
from jpu.events import JobSubmitted, new_event_id
from jpu.store import create_pool, migrate, rebuild, wait_applied
from jpu.store.faults import faults
from jpu.store.projection import run_projections
from jpu.store.projections import ALL, jobs
from jpu.testing.pg_fixtures import sample_log
from jpu.tools.replay import audit


def _poison() -> JobSubmitted:
    return JobSubmitted(
        event_id=new_event_id(),
        ts=5_000.0,
        job_id="job-with-nul",
        lab="BCG",
        user="u1",
        name="nul",
        command="echo \x00",  # PostgreSQL text cannot hold a NUL byte
        num_gpus=1,
    )


async def test_E3_an_event_a_projection_cannot_apply_is_recorded_and_the_rest_applied(
    bus: EventBus, pool: asyncpg.Pool, pg_dsn: str, pg_database_factory
) -> None:
    log = sample_log(8)
    before = await bus.append_many(log[: len(log) // 2])
    (bad,) = await bus.append_many([_poison()])
    after = await bus.append_many(log[len(log) // 2 :])  # later events still apply
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_projections(bus, pool, ALL, stop=stop, batch=16, max_tries=2, retry_delay_s=0.05)
    )
    try:
        for p in ALL:
            await wait_applied(pool, p.name, after[-1], timeout=30)
    finally:
        stop.set()
        await task
    assert before[-1] < bad < after[0]
    recorded = await faults(pool)
    assert [(f.projection, f.seq, f.event_type) for f in recorded] == [
        ("jobs", bad, "JobSubmitted")
    ]
    assert "UntranslatableCharacterError" in recorded[0].error
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE job_id = 'job-with-nul'") == 0
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 8

    # A rebuild takes the same path: the fault is recorded again, nothing crashes (SPEC E6).
    clean = await create_pool(await pg_database_factory(), max_size=2)
    try:
        await migrate(clean)
        assert await rebuild(bus, clean, jobs.projection) == after[-1]
        assert [(f.projection, f.seq) for f in await faults(clean)] == [("jobs", bad)]
    finally:
        await clean.close()

    report = await audit(bus, pool, await pg_database_factory())
    by_name = {p.projection: p for p in report.projections}
    assert [f.seq for f in by_name["jobs"].faults] == [bad]
    assert not report.ok  # an audit never calls a projection with holes complete
    assert "could not apply" in report.summary()


async def test_E3_lost_database_connections_are_retried_not_recorded(
    bus: EventBus, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """Transient errors say nothing about the event: retried without limit, never a fault,
    even with max_tries=1 (every connection of the runner is terminated again and again)."""
    victim = await asyncpg.create_pool(
        pg_dsn, min_size=1, max_size=2, server_settings={"application_name": "victim"}
    )
    stop, killing = asyncio.Event(), asyncio.Event()
    killed = 0

    async def killer() -> None:
        nonlocal killed
        while not killing.is_set():
            killed += await pool.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = 'victim'"
            )
            await asyncio.sleep(0.02)

    kill_task = asyncio.create_task(killer())
    task = asyncio.create_task(
        run_projections(bus, victim, ALL, stop=stop, batch=4, max_tries=1, retry_delay_s=0.02)
    )
    try:
        seqs: list[int] = []
        log = sample_log(6)
        for i in range(0, len(log), 10):
            seqs += await bus.append_many(log[i : i + 10])
            await asyncio.sleep(0.1)
        killing.set()
        await kill_task
        for p in ALL:
            await wait_applied(pool, p.name, seqs[-1], timeout=30)
    finally:
        killing.set()
        stop.set()
        with contextlib.suppress(Exception):
            await task
        await victim.close()
    assert killed > 0
    assert await faults(pool) == []
