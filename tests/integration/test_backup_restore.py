"""Backup and restore (jpu.tools.backup, docs/operations.md) on a real NATS JetStream and
PostgreSQL: every message of every stream comes back at its sequence with its subject, headers and
payload (SPEC E2), the user tables come back, the projections are rebuilt from the restored log
(E3, E6); a damaged file and a non-empty target are refused before anything is touched.

Each test has its own nats-server (the buckets `jpu_views` / `jpu_snapshots` are one per account,
so not the session's shared server) and its own databases.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import pytest_asyncio
from nats.js.errors import NotFoundError

from jpu.bus import EventBus
from jpu.bus.reader import read_range
from jpu.bus.snapshots import SnapshotStore
from jpu.commands import VIEWS_BUCKET
from jpu.embedded.nats import EmbeddedNats
from jpu.store.db import create_pool
from jpu.store.projections import ALL
from jpu.store.rebuilding import rebuild_many
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.pg_fixtures import DatabaseFactory, sample_log
from jpu.tools.backup import RestoreRefused, backup, restore, stream_names
from jpu.tools.backup_format import BackupInvalid
from jpu.tools.identities import Identities

pytestmark = pytest.mark.timeout(120)


@contextlib.asynccontextmanager
async def empty_target(
    server: EmbeddedNats, stream: str, prefix: str, databases: DatabaseFactory
) -> AsyncIterator[tuple[EventBus, asyncpg.Pool, str]]:
    """Every volume gone: the server stopped, its store removed, started empty on its port; a
    new empty database. Its bus, pool and DSN."""
    server.stop()
    shutil.rmtree(server.data_dir / "jetstream", ignore_errors=True)
    server.start()
    dsn = await databases()
    pool = await create_pool(dsn)
    bus = await EventBus.connect(server.url, stream=stream, prefix=prefix, name="pytest-restored")
    try:
        yield bus, pool, dsn
    finally:
        await bus.close()
        await pool.close()


@pytest_asyncio.fixture
async def live(
    own_nats: EmbeddedNats, pool: asyncpg.Pool
) -> AsyncIterator[tuple[EventBus, asyncpg.Pool]]:
    """A log of 40 jobs, a view written 5 times (4 overwritten values: deleted sequences in its
    KV stream), 3 snapshots (thinned to 2: deleted sequences in the object store), a lab with a
    user and a token, projections applied."""
    stream, prefix = unique_names()
    bus = await EventBus.connect(own_nats.url, stream=stream, prefix=prefix, name="pytest")
    await bus.ensure_stream()
    events = sample_log(40)
    for i in range(0, len(events), 200):
        await bus.append_many(events[i : i + 200])
    views = await bus.js.create_key_value(bucket=VIEWS_BUCKET, history=1)
    for i in range(5):
        await views.put(f"queue.{stream}", f'{{"n": {i}}}'.encode())
    snaps = SnapshotStore(bus.js, stream, keep=2)
    for seq in (10, 20, 30):
        await snaps.put(b"x" * 300_000 + str(seq).encode(), seq)
    ids = Identities(bus, None, 1.0, by="tests")  # SEC3: identities are events
    await ids.add_lab("BCG")
    await ids.add_user("bcg-alice", "BCG", "user")
    await ids.install_token("bcg-alice", "token-of-alice")
    await rebuild_many(bus, pool, ALL)
    try:
        yield bus, pool
    finally:
        await bus.close()


async def messages(bus: EventBus, name: str) -> list[tuple[int, str, dict[str, str], bytes]]:
    info = await bus.js.stream_info(name)
    subject = (info.config.subjects or [""])[0]
    return [
        (m.metadata.sequence.stream, m.subject, dict(m.headers or {}), bytes(m.data))
        async for m in read_range(bus.js, name, subject, 1)
    ]


async def streams_state(bus: EventBus) -> dict[str, Any]:
    out = {}
    for name in stream_names(bus):
        info = await bus.js.stream_info(name)
        out[name] = {
            "first_seq": info.state.first_seq,
            "last_seq": info.state.last_seq,
            "messages": info.state.messages,
            "subjects": info.config.subjects,
            "deny_delete": info.config.deny_delete,
            "duplicate_window": info.config.duplicate_window,
            "log": await messages(bus, name),
        }
    return out


async def table(pool: asyncpg.Pool, sql: str) -> list[dict[str, Any]]:
    return [dict(r) for r in await pool.fetch(sql)]


JOBS = "SELECT * FROM jobs ORDER BY job_id"
USERS = "SELECT row_to_json(t)::text FROM (SELECT * FROM users ORDER BY name) t UNION ALL "
USERS += "SELECT row_to_json(t)::text FROM (SELECT * FROM api_tokens ORDER BY token_hash) t"


async def test_E2_E3_restore_into_an_empty_cluster_keeps_every_sequence_and_rebuilds_projections(
    live: tuple[EventBus, asyncpg.Pool],
    own_nats: EmbeddedNats,
    pg_database_factory: DatabaseFactory,
    tmp_path: Path,
) -> None:
    bus, pool = live
    before = await streams_state(bus)
    assert before[f"KV_{VIEWS_BUCKET}"]["first_seq"] > 1  # overwritten values: a gap to keep
    jobs_before, users_before = await table(pool, JOBS), await table(pool, USERS)
    assert len(jobs_before) == 40 and users_before
    file = tmp_path / "platform.jpubak"
    with file.open("wb") as out:
        counts = await backup(bus, pool, out, lambda _: None)
    assert counts[bus.stream] == before[bus.stream]["messages"]

    target = empty_target(own_nats, bus.stream, bus.prefix, pg_database_factory)
    async with target as (bus2, new_pool, _):
        with pytest.raises(NotFoundError):
            await bus2.js.stream_info(bus.stream)  # the cluster is empty
        await bus2.ensure_stream()  # what a service's start would make: empty streams are fine
        await restore(bus2, new_pool, file)
        after = await streams_state(bus2)
        for name in before:  # stream by stream, field by field: a failure says which
            for key in before[name]:
                assert after[name][key] == before[name][key], (name, key)
        assert after == before
        assert await table(new_pool, JOBS) == jobs_before
        assert await table(new_pool, USERS) == users_before
        # the optimistic-concurrency guard (E2) reads the restored sequences as the old ones
        last = before[bus.stream]["log"][-1]
        assert await bus2.last_subject_seq(last[1]) == last[0]
        # the snapshots load by their sequence names; the view reads as written last
        snaps = SnapshotStore(bus2.js, bus.stream, keep=2)
        assert await snaps.seqs() == [30, 20]
        view = await (await bus2.js.key_value(VIEWS_BUCKET)).get(f"queue.{bus.stream}")
        assert view.value == b'{"n": 4}'


async def test_E6_a_damaged_backup_is_refused_naming_the_fault_before_the_cluster_is_touched(
    live: tuple[EventBus, asyncpg.Pool],
    own_nats: EmbeddedNats,
    pg_database_factory: DatabaseFactory,
    tmp_path: Path,
) -> None:
    bus, pool = live
    good = tmp_path / "good.jpubak"
    with good.open("wb") as out:
        await backup(bus, pool, out, lambda _: None)
    data = good.read_bytes()
    truncated, flipped = tmp_path / "truncated.jpubak", tmp_path / "flipped.jpubak"
    truncated.write_bytes(data[: len(data) * 2 // 3])
    middle = len(data) // 2
    flipped.write_bytes(data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :])
    not_ours = tmp_path / "not-a-backup"
    not_ours.write_bytes(b"PK\x03\x04 a zip file")

    target = empty_target(own_nats, bus.stream, bus.prefix, pg_database_factory)
    async with target as (bus2, new_pool, new_dsn):
        for path, said in (
            (truncated, "truncated"),
            (flipped, "checksum mismatch"),
            (not_ours, "not a JPU-Share backup"),
        ):
            with pytest.raises(BackupInvalid, match=said) as e:
                await restore(bus2, new_pool, path)
            assert str(path) in str(e.value)
            for name in stream_names(bus2):  # nothing created
                with pytest.raises(NotFoundError):
                    await bus2.js.stream_info(name)
        assert not await new_pool.fetchval("SELECT to_regclass('public.users') IS NOT NULL")
        # the command says it too, and exits 2
        run = admin("restore", str(flipped), "--nats", own_nats.url, "--database-url", new_dsn)
        assert run.returncode == 2
        assert "refused" in run.stderr and "checksum mismatch" in run.stderr


async def test_O5_restore_into_a_cluster_that_holds_a_log_is_refused_unless_forced(
    live: tuple[EventBus, asyncpg.Pool], own_nats: EmbeddedNats, pg_dsn: str, tmp_path: Path
) -> None:
    bus, pool = live
    file = tmp_path / "platform.jpubak"
    run = admin("backup", str(file), "--nats", own_nats.url, "--database-url", pg_dsn, bus=bus)
    assert run.returncode == 0, run.stderr
    assert file.exists() and not file.with_name(file.name + ".part").exists()
    before = await streams_state(bus)
    jobs_before = await table(pool, JOBS)
    with pytest.raises(RestoreRefused, match=f"stream {bus.stream} .*not empty|not empty"):
        await restore(bus, pool, file)
    run = admin("restore", str(file), "--nats", own_nats.url, "--database-url", pg_dsn, bus=bus)
    assert run.returncode == 2
    assert f"stream {bus.stream} (" in run.stderr and "--force" in run.stderr
    assert await streams_state(bus) == before  # untouched
    await restore(bus, pool, file, force=True)
    assert await streams_state(bus) == before
    assert await table(pool, JOBS) == jobs_before


def admin(*args: str, bus: EventBus | None = None) -> subprocess.CompletedProcess[str]:
    env = None
    if bus is not None:
        env = {**os.environ, "JPU_STREAM_NAME": bus.stream, "JPU_SUBJECT_PREFIX": bus.prefix}
    return subprocess.run(
        [sys.executable, "-m", "jpu.tools.admin", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
