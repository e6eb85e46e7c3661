"""Projections follow the real log live and rebuild to the same rows (SPEC E3, E6)."""

from __future__ import annotations

import asyncio
import contextlib
import sys

import asyncpg
from nats.aio.msg import Msg

from jpu.bus import EventBus
from jpu.bus.ordered import follow_ordered, sequences
from jpu.store import create_pool, last_applied, migrate, rebuild, run_projection, wait_applied
from jpu.store.projections import ALL
from jpu.testing.pg_fixtures import sample_log
from jpu.tools.identities import Identities
from jpu.tools.replay import audit, compare_table


@contextlib.asynccontextmanager
async def projectors(bus: EventBus, pool: asyncpg.Pool):
    stop = asyncio.Event()
    tasks = [asyncio.create_task(run_projection(bus, pool, p, stop=stop, batch=128)) for p in ALL]
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=15)


async def _fill_live(bus: EventBus, pool: asyncpg.Pool, n_jobs: int) -> int:
    async with projectors(bus, pool):
        await bus.append_many(sample_log(n_jobs))
        ids = Identities(bus, None, 1.0, by="tests")  # SEC3: the auth tables are a fold too
        await ids.add_lab("BCG")
        await ids.add_user("bcg-alice", "BCG", "lab_admin", 3)
        await ids.install_token("bcg-alice", "token-of-alice")
        last = await bus.last_seq()
        for p in ALL:
            await wait_applied(pool, p.name, last, timeout=30)
    return last


async def test_E3_rebuild_equals_live(bus: EventBus, pool: asyncpg.Pool, pg_database_factory):
    last = await _fill_live(bus, pool, 60)
    # sanity: the live projections saw a realistic mix
    states = dict(await pool.fetch("SELECT state, count(*) FROM jobs GROUP BY state"))
    assert set(states) == {"COMPLETED", "FAILED", "CANCELLED"} and sum(states.values()) == 60
    assert await pool.fetchval("SELECT count(*) FROM lab_usage") == 3
    assert (
        await pool.fetchval(
            "SELECT state FROM gpu_resources WHERE index = 1 AND node = 'gpu-4090x2-01'"
        )
        == "down"
    )

    # 1) rebuilt into a second database, table by table identical
    other = await create_pool(await pg_database_factory(), max_size=2)
    try:
        await migrate(other)
        for p in ALL:
            assert await rebuild(bus, other, p) == last
            for table in p.tables:
                diff = await compare_table(pool, other, table)
                assert diff.differing == 0, diff
                assert diff.live_rows == diff.rebuilt_rows > 0
    finally:
        await other.close()

    # 2) rebuilt in place (tables emptied first): same rows as before
    before = {
        t: sorted(map(tuple, await pool.fetch(f"SELECT * FROM {t}")), key=repr)
        for p in ALL
        for t in p.tables
    }
    for p in ALL:
        assert await rebuild(bus, pool, p) == last
        assert await last_applied(pool, p.name) == last
    after = {
        t: sorted(map(tuple, await pool.fetch(f"SELECT * FROM {t}")), key=repr) for t in before
    }
    assert after == before


async def test_E6_replay_reports_no_difference(bus, pool, pg_database_factory) -> None:
    await _fill_live(bus, pool, 30)
    report = await audit(bus, pool, await pg_database_factory())
    assert report.compared and report.ok, report.summary()
    assert {p.projection for p in report.projections} == {p.name for p in ALL}


async def test_E6_replay_reads_the_log_without_headers(
    bus: EventBus, nats_url: str, pool, pg_database_factory
) -> None:
    """The replay's connection drops the messages' own headers (the projections read none)
    but still reads the server's status lines: its ordered reader ends at the log's end, and
    the rows it rebuilds are the live ones."""
    last = await _fill_live(bus, pool, 20)
    bare = await EventBus.connect(
        nats_url, stream=bus.stream, prefix=bus.prefix, name="pytest-bare", headers=False
    )
    try:
        seen: list[Msg] = []
        stop = asyncio.Event()
        async for msgs in follow_ordered(bare.js, bare.stream, f"{bare.prefix}.>", 1, stop):
            seen += msgs
            if len(seen) >= last:
                stop.set()
        assert [sequences(m)[0] for m in seen] == list(range(1, last + 1))
        assert all(m.headers is None for m in seen)
        kept = follow_ordered(bus.js, bus.stream, f"{bus.prefix}.>", 1, asyncio.Event())
        async with contextlib.aclosing(kept) as batches:
            first = (await anext(batches))[0]
        assert first.headers  # the same message over a bus that keeps them: its Nats-Msg-Id
        report = await audit(bare, pool, await pg_database_factory())
        assert report.compared and report.ok, report.summary()
    finally:
        await bare.close()


async def test_E6_replay_reports_a_tampered_row(bus, pool, pg_database_factory) -> None:
    await _fill_live(bus, pool, 30)
    await pool.execute("UPDATE lab_usage SET value = value + 1 WHERE lab = 'BCG'")
    await pool.execute("DELETE FROM jobs WHERE job_id = 'job000001'")
    report = await audit(bus, pool, await pg_database_factory())
    assert not report.ok
    bad = {t.table: t for p in report.projections for t in p.tables if t.differing}
    assert set(bad) == {"lab_usage", "jobs"}
    assert bad["lab_usage"].differing == 2  # the tampered row vs the replayed one
    assert bad["jobs"].only_rebuilt[0]["job_id"] == "job000001"
    assert "DIFFERENT" in report.summary()


async def test_E6_replay_until_ts_rebuilds_a_point_in_time(bus, pool, pg_database_factory):
    log = sample_log(20)
    await bus.append_many(log)
    cut = log[len(log) // 2].ts
    scratch = await pg_database_factory()
    report = await audit(bus, pool, scratch, until_ts=cut)
    assert not report.compared
    s = await create_pool(scratch, max_size=1)
    try:
        assert await s.fetchval("SELECT max(updated_at) FROM jobs") <= cut
        expected = sum(1 for e in log if e.ts <= cut and type(e).__name__ == "JobSubmitted")
        assert await s.fetchval("SELECT count(*) FROM jobs") == expected
    finally:
        await s.close()


async def test_E6_replay_cli_exit_code(bus: EventBus, nats_url: str, pool, pg_dsn: str) -> None:
    last = await _fill_live(bus, pool, 10)

    async def run_cli() -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jpu.tools.replay", "--nats", nats_url, "--db", pg_dsn,
            "--stream", bus.stream, "--prefix", bus.prefix,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        return proc.returncode, out.decode(), err.decode()

    code, out, err = await run_cli()
    assert code == 0, out + err
    assert "no differences" in out and f"seq {last} of {last}" in err  # progress on stderr (U3)
    assert "events/s" in err
    await pool.execute("UPDATE maintenance SET message = 'forged'")
    code, out, _ = await run_cli()
    assert code == 1 and "DIFFERENCES FOUND" in out and "forged" in out
