"""jpu-admin (`python -m jpu.tools.admin`) against real NATS JetStream and PostgreSQL: labs, users,
tokens — each an event in the log (SPEC SEC3) that the `identities` projection folds into the
tables the gateway authenticates against."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest_asyncio

from jpu.bus import EventBus
from jpu.store import auth
from jpu.store.projection import run_projections
from jpu.store.projections import identities
from jpu.testing.api import Api, assert_error, bearer
from jpu_services.gateway.deps import TOKEN_CACHE_S


@dataclass(frozen=True)
class Log:
    """Where the tool appends: the NATS server and the stream (with its subject prefix)."""

    nats_url: str
    stream: str
    prefix: str


async def admin(
    log: Log, dsn: str, *args: str, ok: bool = True
) -> subprocess.CompletedProcess[str]:
    """The tool in a subprocess, off the event loop: the projector it waits for runs here."""
    env = os.environ | {"JPU_STREAM_NAME": log.stream, "JPU_SUBJECT_PREFIX": log.prefix}
    tool = [sys.executable, "-P", "-m", "jpu.tools.admin"]
    r = await asyncio.to_thread(
        subprocess.run,
        [*tool, "--database-url", dsn, "--nats-url", log.nats_url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    if ok:
        assert r.returncode == 0, r.stderr
    return r


@pytest_asyncio.fixture
async def log(nats_url: str, bus: EventBus, pool: asyncpg.Pool) -> AsyncIterator[Log]:
    """A fresh stream and the projector folding its identity events, as the gateway's does."""
    stop = asyncio.Event()
    task = asyncio.create_task(run_projections(bus, pool, (identities.projection,), stop=stop))
    try:
        yield Log(nats_url, bus.stream, bus.prefix)
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


def _api_log(api: Api) -> Log:
    return Log(api.config.nats_url, api.config.stream_name, api.config.subject_prefix)


async def test_admin_token_rotate_revoke(log: Log, pg_dsn: str, pool: asyncpg.Pool) -> None:
    assert "added" in (await admin(log, pg_dsn, "lab", "add", "BCG")).stdout
    assert "already exists" in (await admin(log, pg_dsn, "lab", "add", "BCG")).stdout
    await admin(
        log,
        pg_dsn,
        "user",
        "add",
        "bcg-zoe",
        "--lab",
        "BCG",
        "--role",
        "lab_admin",
        "--max-active-jobs",
        "5",
    )

    first = (await admin(log, pg_dsn, "token", "create", "bcg-zoe")).stdout.strip()
    second = (await admin(log, pg_dsn, "token", "create", "bcg-zoe")).stdout.strip()
    assert first != second
    for token in (first, second):  # create adds a token; both work
        assert await auth.authenticate(pool, token) == auth.Principal(
            "bcg-zoe", "BCG", "lab_admin", 5
        )

    rotated = (await admin(log, pg_dsn, "token", "rotate", "bcg-zoe")).stdout.strip()
    assert await auth.authenticate(pool, first) is None
    assert await auth.authenticate(pool, second) is None
    assert (await auth.authenticate(pool, rotated)) is not None

    assert "revoked 1 token(s)" in (await admin(log, pg_dsn, "token", "revoke", "bcg-zoe")).stdout
    assert await auth.authenticate(pool, rotated) is None

    users = json.loads((await admin(log, pg_dsn, "user", "list", "--json")).stdout)
    assert users == [
        {
            "name": "bcg-zoe",
            "lab": "BCG",
            "role": "lab_admin",
            "max_active_jobs": 5,
            "active_tokens": 0,
        }
    ]


async def test_admin_refuses_unknown_lab_user_and_role(log: Log, pg_dsn: str) -> None:
    r = await admin(log, pg_dsn, "user", "add", "x", "--lab", "NOPE", ok=False)
    assert r.returncode == 2 and "unknown lab 'NOPE'" in r.stderr
    r = await admin(log, pg_dsn, "token", "create", "ghost", ok=False)
    assert r.returncode == 2 and "unknown user 'ghost'" in r.stderr
    r = await admin(log, pg_dsn, "user", "add", "x", "--lab", "BCG", "--role", "root", ok=False)
    assert r.returncode == 2 and "invalid choice" in r.stderr  # argparse usage error


async def test_admin_seed_demo_is_idempotent(log: Log, pg_dsn: str, pool: asyncpg.Pool) -> None:
    out = (await admin(log, pg_dsn, "seed-demo")).stdout
    assert (await admin(log, pg_dsn, "seed-demo")).stdout == out
    assert "demo-bcg-alice" in out and "demo-admin" in out
    users = {p.name: p for p, _ in await auth.list_users(pool)}
    assert {
        "bcg-alice",
        "bcg-bob",
        "kdg-carol",
        "kdg-dave",
        "osl-erin",
        "osl-frank",
        "admin",
    } == set(users)
    assert users["admin"].role == "admin"
    assert (await auth.authenticate(pool, "demo-osl-frank")).lab == "OSL"  # type: ignore[union-attr]


async def test_admin_user_remove_revokes_and_keeps_the_row(pg_dsn: str, api: Api) -> None:
    # a removed user's token answers 401 at the gateway; the row stays for the audit (jobs and
    # charges in the log name the user), and the name is not reused
    log = _api_log(api)
    (await admin(log, pg_dsn, "user", "add", "kdg-leaver", "--lab", "KDG"))
    token = (await admin(log, pg_dsn, "token", "create", "kdg-leaver")).stdout.strip()
    assert (await api.client.get("/v1/me", headers=bearer(token=token))).status_code == 200

    out = (await admin(log, pg_dsn, "user", "remove", "kdg-leaver")).stdout
    assert "user kdg-leaver removed; revoked 1 token(s)" in out
    await asyncio.sleep(TOKEN_CACHE_S + 0.1)  # the gateway's accepted-token cache
    assert_error(
        await api.client.get("/v1/me", headers=bearer(token=token)), 401, "UNAUTHENTICATED"
    )

    assert "kdg-leaver" not in (await admin(log, pg_dsn, "user", "list")).stdout
    row = await api.pool.fetchrow("SELECT lab, removed_at FROM users WHERE name = 'kdg-leaver'")
    assert row is not None and row["lab"] == "KDG" and row["removed_at"] is not None
    assert (
        await api.pool.fetchval(
            """SELECT count(*) FROM api_tokens
                WHERE "user" = 'kdg-leaver' AND revoked_at IS NOT NULL"""
        )
        == 1
    )
    assert (
        "user kdg-leaver was removed"
        in (await admin(log, pg_dsn, "user", "add", "kdg-leaver", "--lab", "KDG")).stdout
    )
    r = await admin(log, pg_dsn, "token", "create", "kdg-leaver", ok=False)
    assert r.returncode == 2 and "user 'kdg-leaver' was removed" in r.stderr
    r = await admin(log, pg_dsn, "user", "remove", "ghost", ok=False)
    assert r.returncode == 2 and "unknown user 'ghost'" in r.stderr
