"""SPEC E3 + O5: a projector SIGKILLed at any moment — with a batch fetched
and not yet committed, or right after a commit — never drops an event from the views.

The old runner acked a durable consumer and skipped "seq <= position": after a crash the server
handed out later messages before the unacked earlier ones, the later ones moved the position, and
the earlier ones were skipped for ever. Here a real projector process (all the gateway's
projections on one ordered read) is killed again and again while a writer appends, and each
projection must end equal to a rebuild from sequence 1.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys

import asyncpg

from jpu.bus import EventBus
from jpu.store import create_pool, last_applied, migrate, rebuild, wait_applied
from jpu.store.projections import ALL
from jpu.testing.pg_fixtures import sample_log
from jpu.tools.replay import compare_table

PROJECTOR = """
import asyncio, signal, sys
from jpu.bus import EventBus
from jpu.store import create_pool
from jpu.store.projection import run_projections
from jpu.store.projections import ALL

async def main(url, stream, prefix, dsn):
    bus = await EventBus.connect(url, stream=stream, prefix=prefix, name="projector")
    pool = await create_pool(dsn)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)

    async def after_commit(seq):
        print(f"COMMITTED {seq}", flush=True)

    await run_projections(bus, pool, ALL, stop=stop, batch=int(sys.argv[5]),
                          after_commit=after_commit)
    await pool.close()
    await bus.close()

asyncio.run(main(*sys.argv[1:5]))
"""


async def _spawn(bus: EventBus, nats_url: str, dsn: str, batch: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-P",
        "-c",
        PROJECTOR,
        nats_url,
        bus.stream,
        bus.prefix,
        dsn,
        str(batch),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def _kill_after(proc: asyncio.subprocess.Process, rng: random.Random) -> str:
    """SIGKILL at a random moment: right after the k-th commit, or after a random delay (which
    lands mid-fetch, mid-transaction or between the two)."""
    assert proc.stdout is not None
    if rng.random() < 0.5:
        await asyncio.wait_for(proc.stdout.readline(), timeout=30)  # READY
        k, seen = rng.randint(1, 3), 0
        try:  # once the log is all applied, no commit comes: kill it idle
            for _ in range(k):
                line = await asyncio.wait_for(proc.stdout.readline(), timeout=5)
                assert line.startswith(b"COMMITTED"), line
                seen += 1
        except TimeoutError:
            pass
        how = f"after commit {seen} of {k}"
    else:
        delay = rng.uniform(0.05, 1.5)
        await asyncio.sleep(delay)
        how = f"after {delay:.2f} s"
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    return how


async def _append_slowly(bus: EventBus, events: list, stop: asyncio.Event) -> list[int]:
    seqs: list[int] = []
    for i in range(0, len(events), 7):
        seqs += await bus.append_many(events[i : i + 7])
        await asyncio.sleep(0.01)
    stop.set()
    return seqs


async def test_E3_projector_killed_at_random_moments_equals_a_rebuild(
    bus: EventBus, nats_url: str, pool: asyncpg.Pool, pg_dsn: str, pg_database_factory
) -> None:
    rng = random.Random(20261201)
    events = sample_log(120)
    head = await bus.append_many(events[:60])  # a backlog at the first start, then live appends
    done = asyncio.Event()
    writer = asyncio.create_task(_append_slowly(bus, events[60:], done))
    kills: list[str] = []
    try:
        while not done.is_set() or len(kills) < 8:
            proc = await _spawn(bus, nats_url, pg_dsn, batch=rng.choice((3, 8, 50)))
            try:
                kills.append(await _kill_after(proc, rng))
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        seqs = head + await writer
    finally:
        writer.cancel()
    assert len(kills) >= 8

    last = await _spawn(bus, nats_url, pg_dsn, batch=64)
    try:
        assert last.stdout is not None
        assert await asyncio.wait_for(last.stdout.readline(), timeout=30) == b"READY\n"
        for p in ALL:
            await wait_applied(pool, p.name, seqs[-1], timeout=60)
        last.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(last.wait(), timeout=20) == 0
    finally:
        if last.returncode is None:
            last.kill()

    clean = await create_pool(await pg_database_factory(), max_size=2)
    try:
        await migrate(clean)
        for p in ALL:
            assert await last_applied(pool, p.name) == seqs[-1]
            assert await rebuild(bus, clean, p) == seqs[-1]
            for table in p.tables:
                diff = await compare_table(pool, clean, table)
                assert diff.differing == 0, (p.name, table, kills, diff)
        assert await pool.fetchval("SELECT count(*) FROM jobs") == 120
        assert await pool.fetchval("SELECT count(*) FROM projection_faults") == 0
    finally:
        await clean.close()
