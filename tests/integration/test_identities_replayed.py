"""SPEC SEC3 (+ E6): identities are events, so a replay rebuilds who may authenticate exactly,
and what an earlier version kept only in its tables is adopted into the log once."""

from __future__ import annotations

import asyncpg

from jpu.bus import EventBus
from jpu.store import auth
from jpu.store.projections import identities
from jpu.store.rebuilding import rebuild
from jpu.tools.identities import Identities, adopt

_TABLES = (
    "SELECT name, created_at FROM labs ORDER BY name",
    "SELECT name, lab, role, max_active_jobs, created_at, removed_at FROM users ORDER BY name",
    'SELECT token_hash, "user", created_at, revoked_at FROM api_tokens ORDER BY token_hash',
)


async def _tables(pool: asyncpg.Pool) -> list[list[asyncpg.Record]]:
    return [await pool.fetch(q) for q in _TABLES]


async def test_SEC3_replay_rebuilds_identities_from_the_log(
    bus: EventBus, pool: asyncpg.Pool
) -> None:
    await bus.ensure_stream()
    ids = Identities(bus, None, 1_000.0, by="tests")
    await ids.add_lab("BCG")
    await ids.add_user("bcg-alice", "BCG", "lab_admin", 4)
    await ids.add_user("bcg-gone", "BCG")
    kept = await ids.create_token("bcg-alice")
    old = await ids.create_token("bcg-gone")
    await ids.remove_user("bcg-gone")
    await rebuild(bus, pool, identities.projection)
    before = await _tables(pool)
    assert await auth.authenticate(pool, kept) == auth.Principal("bcg-alice", "BCG", "lab_admin", 4)
    assert await auth.authenticate(pool, old) is None  # revoked with the user: stays so

    await pool.execute("DELETE FROM api_tokens; DELETE FROM users; DELETE FROM labs")
    assert await auth.authenticate(pool, kept) is None
    await rebuild(bus, pool, identities.projection)
    assert await _tables(pool) == before  # dates included: they are the events' own
    assert (await auth.authenticate(pool, kept)) is not None


async def test_SEC3_an_earlier_versions_rows_are_adopted_into_the_log_once(
    bus: EventBus, pool: asyncpg.Pool
) -> None:
    await bus.ensure_stream()
    # as a version that kept identities only in PostgreSQL left them
    await pool.execute(
        """INSERT INTO labs (name, created_at) VALUES ('KDG', '2026-01-01T00:00:00Z');
           INSERT INTO users (name, lab, role, created_at)
                VALUES ('kdg-carol', 'KDG', 'user', '2026-01-02T00:00:00Z');
           INSERT INTO users (name, lab, role, created_at, removed_at)
                VALUES ('kdg-left', 'KDG', 'user', '2026-01-02T00:00:00Z',
                        '2026-03-01T00:00:00Z');
           INSERT INTO api_tokens (token_hash, "user", created_at)
                VALUES (repeat('a', 64), 'kdg-carol', '2026-01-03T00:00:00Z');
           INSERT INTO api_tokens (token_hash, "user", created_at, revoked_at)
                VALUES (repeat('b', 64), 'kdg-left', '2026-01-03T00:00:00Z',
                        '2026-03-01T00:00:00Z');"""
    )
    before = await _tables(pool)
    assert (
        await adopt(bus, pool, 2_000_000_000.0) == 7
    )  # lab, 2 users, 2 tokens, 1 revoke, 1 removal
    assert await adopt(bus, pool, 2_000_000_000.0) == 0  # every start: nothing twice
    events = [d.event async for d in bus.replay(filter_subject=f"{bus.prefix}.identity.>")]
    assert {e.by for e in events} == {"adopted from the database"}

    await rebuild(bus, pool, identities.projection)  # empties the tables, folds the log
    assert await _tables(pool) == before
