"""jpu-admin (`python -m jpu.tools.admin`) against a real PostgreSQL: labs, users, tokens."""

from __future__ import annotations

import json
import subprocess
import sys

import asyncpg

from jpu.store import auth


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
