"""SPEC O5 + E3: a projector SIGKILLed right after a commit loses nothing and applies nothing
twice. The projector runs in a real subprocess reading the log in order from its committed
position (jpu.bus.ordered); see test_projection_crash.py for kills at random moments."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import asyncpg

from jpu.bus import EventBus
from jpu.store import create_pool, last_applied, migrate, rebuild, wait_applied
from jpu.store.projections import jobs
from jpu.testing.pg_fixtures import sample_log
from jpu.tools.replay import compare_table

PROJECTOR = """
import asyncio, signal, sys
from jpu.bus import EventBus
from jpu.store import create_pool, run_projection
from jpu.store.projections import jobs

async def main(url, stream, prefix, dsn, hang_after):
    bus = await EventBus.connect(url, stream=stream, prefix=prefix, name="projector")
    pool = await create_pool(dsn)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    commits = 0

    async def after_commit(seq):
        nonlocal commits
        commits += 1
        print(f"COMMITTED {seq}", flush=True)
        if commits == hang_after:
            await asyncio.sleep(3600)  # SIGKILLed here: committed, not acked

    await run_projection(bus, pool, jobs.projection, stop=stop, batch=50,
                         after_commit=after_commit)
    await pool.close()
    await bus.close()

url, stream, prefix, dsn, hang_after = sys.argv[1:]
asyncio.run(main(url, stream, prefix, dsn, int(hang_after)))
"""


async def _spawn(bus: EventBus, nats_url: str, dsn: str, hang_after: int):
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PROJECTOR,
        nats_url,
        bus.stream,
        bus.prefix,
        dsn,
        str(hang_after),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def _committed(proc, n: int) -> int:
    """Wait for the projector's n-th commit; returns its last seq."""
    seq = 0
    for _ in range(n):
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        assert line.startswith(b"COMMITTED"), line
        seq = int(line.split()[1])
    return seq


async def test_O5_projector_killed_after_its_commit_loses_nothing(
    bus: EventBus, nats_url: str, pool: asyncpg.Pool, pg_dsn: str, pg_database_factory
) -> None:
    seqs = await bus.append_many(sample_log(80))
    assert len(seqs) > 400

    first = await _spawn(bus, nats_url, pg_dsn, hang_after=3)
    try:
        committed = await _committed(first, 3)
        assert await last_applied(pool, "jobs") == committed  # the tx is durable...
        first.send_signal(signal.SIGKILL)  # ...the ack never went out
        await first.wait()
    finally:
        if first.returncode is None:
            first.kill()
    assert await last_applied(pool, "jobs") == committed

    second = await _spawn(bus, nats_url, pg_dsn, hang_after=0)
    try:
        # it reads on from the committed position: its first commit is past it
        assert await _committed(second, 1) > committed
        await wait_applied(pool, "jobs", seqs[-1], timeout=60)
        second.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), timeout=20) == 0
    finally:
        if second.returncode is None:
            second.kill()
    assert await last_applied(pool, "jobs") == seqs[-1]

    # Exactly once: the redelivered batch was skipped, so the live table equals a clean replay
    # (a double-applied UsageCharged would show as a different usage_charged).
    clean = await create_pool(await pg_database_factory(), max_size=2)
    try:
        await migrate(clean)
        assert await rebuild(bus, clean, jobs.projection) == seqs[-1]
        diff = await compare_table(pool, clean, "jobs")
        assert diff.differing == 0, diff
        assert diff.live_rows == 80
    finally:
        await clean.close()
