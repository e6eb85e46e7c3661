"""asyncpg pool and schema migrations.

Migrations are `migrations/NNNN_name.sql`, applied in name order, each once, each in its own
transaction. Numbers 0001–0099 belong to the store (projections), 0100+ to the gateway (auth).
An advisory lock serialises concurrent `migrate` calls, so services starting together don't race.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit, urlunsplit

import asyncpg

MIGRATIONS_DIR: Final = Path(__file__).parent / "migrations"
_MIGRATE_LOCK_KEY: Final = 0x4A50555F4D494752  # "JPU_MIGR": any constant shared by all services


async def _init_connection(conn: asyncpg.Connection) -> None:
    # json/jsonb columns are dicts/lists in Python, both ways.
    for typ in ("json", "jsonb"):
        await conn.set_type_codec(typ, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """On release, asyncpg always ends an open transaction; its default reset then also sends
    `pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL` — a round trip after every
    pooled query (a third of the gateway's time under load). Nothing here leaves session state
    on a pooled connection (no SET, LISTEN or cursors; `migrate` unlocks its own advisory lock),
    so that round trip is skipped."""


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    """A pool whose connections map json/jsonb to Python objects."""
    pool = await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, init=_init_connection, reset=_keep_session
    )
    assert pool is not None
    return pool


def migration_files(directory: Path = MIGRATIONS_DIR) -> list[Path]:
    return sorted(p for p in directory.glob("*.sql") if p.name[:4].isdigit())


async def migrate(pool: asyncpg.Pool, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply the migrations not applied yet; returns their names (in order)."""
    applied_now: list[str] = []
    async with pool.acquire() as conn:
        await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATE_LOCK_KEY)
        try:
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            done = {r["version"] for r in await conn.fetch("SELECT version FROM schema_migrations")}
            for path in migration_files(directory):
                if path.name in done:
                    continue
                async with conn.transaction():
                    await conn.execute(path.read_text())
                    await conn.execute(
                        "INSERT INTO schema_migrations (version) VALUES ($1)", path.name
                    )
                applied_now.append(path.name)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATE_LOCK_KEY)
    return applied_now


def with_database(dsn: str, database: str) -> str:
    """The same server DSN pointing at another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


async def create_database(server_dsn: str, name: str) -> str:
    """CREATE DATABASE `name` on the server of `server_dsn` (if missing); returns its DSN."""
    conn = await asyncpg.connect(with_database(server_dsn, "postgres"))
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            await conn.execute(f'CREATE DATABASE "{_ident(name)}"')
    finally:
        await conn.close()
    return with_database(server_dsn, name)


async def drop_database(server_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(with_database(server_dsn, "postgres"))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{_ident(name)}" WITH (FORCE)')
    finally:
        await conn.close()


def _ident(name: str) -> str:
    if not name.replace("_", "").isalnum() or not name.isascii():
        raise ValueError(f"bad database name {name!r}")
    return name
