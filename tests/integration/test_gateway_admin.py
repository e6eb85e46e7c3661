"""jpu-admin (`python -m jpu.tools.admin`) against a real PostgreSQL: labs, users, tokens."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import asyncpg

from jpu.store import auth
from jpu.testing.api import Api, assert_error, bearer
from jpu_services.gateway.deps import TOKEN_CACHE_S


def admin(dsn: str, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(
        [sys.executable, "-m", "jpu.tools.admin", "--database-url", dsn, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if ok:
        assert r.returncode == 0, r.stderr
    return r


async def test_admin_token_rotate_revoke(pg_dsn: str, pool: asyncpg.Pool) -> None:
    assert "added" in admin(pg_dsn, "lab", "add", "BCG").stdout
    assert "already exists" in admin(pg_dsn, "lab", "add", "BCG").stdout
    admin(
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

    first = admin(pg_dsn, "token", "create", "bcg-zoe").stdout.strip()
    second = admin(pg_dsn, "token", "create", "bcg-zoe").stdout.strip()
    assert first != second
    for token in (first, second):  # create adds a token; both work
        assert await auth.authenticate(pool, token) == auth.Principal(
            "bcg-zoe", "BCG", "lab_admin", 5
        )

    rotated = admin(pg_dsn, "token", "rotate", "bcg-zoe").stdout.strip()
    assert await auth.authenticate(pool, first) is None
    assert await auth.authenticate(pool, second) is None
    assert (await auth.authenticate(pool, rotated)) is not None

    assert "revoked 1 token(s)" in admin(pg_dsn, "token", "revoke", "bcg-zoe").stdout
    assert await auth.authenticate(pool, rotated) is None

    users = json.loads(admin(pg_dsn, "user", "list", "--json").stdout)
    assert users == [
        {
            "name": "bcg-zoe",
            "lab": "BCG",
            "role": "lab_admin",
            "max_active_jobs": 5,
            "active_tokens": 0,
        }
    ]


async def test_admin_refuses_unknown_lab_user_and_role(pg_dsn: str) -> None:
    r = admin(pg_dsn, "user", "add", "x", "--lab", "NOPE", ok=False)
    assert r.returncode == 2 and "unknown lab 'NOPE'" in r.stderr
    r = admin(pg_dsn, "token", "create", "ghost", ok=False)
    assert r.returncode == 2 and "unknown user 'ghost'" in r.stderr
    r = admin(pg_dsn, "user", "add", "x", "--lab", "BCG", "--role", "root", ok=False)
    assert r.returncode == 2 and "invalid choice" in r.stderr  # argparse usage error


async def test_admin_seed_demo_is_idempotent(pg_dsn: str, pool: asyncpg.Pool) -> None:
    out = admin(pg_dsn, "seed-demo").stdout
    assert admin(pg_dsn, "seed-demo").stdout == out
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
    # issue 34 item 4: a removed user's token answers 401 at the gateway; the row stays for the
    # audit (jobs and charges in the log name the user), and the name is not reused
    admin(pg_dsn, "user", "add", "kdg-leaver", "--lab", "KDG")
    token = admin(pg_dsn, "token", "create", "kdg-leaver").stdout.strip()
    assert (await api.client.get("/v1/me", headers=bearer(token=token))).status_code == 200

    out = admin(pg_dsn, "user", "remove", "kdg-leaver").stdout
    assert "user kdg-leaver removed; revoked 1 token(s)" in out
    await asyncio.sleep(TOKEN_CACHE_S + 0.1)  # the gateway's accepted-token cache
    assert_error(
        await api.client.get("/v1/me", headers=bearer(token=token)), 401, "UNAUTHENTICATED"
    )

    assert "kdg-leaver" not in admin(pg_dsn, "user", "list").stdout
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
        in admin(pg_dsn, "user", "add", "kdg-leaver", "--lab", "KDG").stdout
    )
    r = admin(pg_dsn, "token", "create", "kdg-leaver", ok=False)
    assert r.returncode == 2 and "user 'kdg-leaver' was removed" in r.stderr
    r = admin(pg_dsn, "user", "remove", "ghost", ok=False)
    assert r.returncode == 2 and "unknown user 'ghost'" in r.stderr
