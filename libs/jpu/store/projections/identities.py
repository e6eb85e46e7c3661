"""Labs, users and token digests (SPEC SEC3): the authentication tables as a fold of the
identity events (jpu.domain.identities decides them; store/migrations/0100_auth.sql holds the
tables, jpu.store.auth reads them). Each write is idempotent, so a replay or a row adopted from
an earlier version's table (jpu.tools.identities.adopt) changes nothing."""

from __future__ import annotations

import asyncpg

from jpu.bus.model import Delivered
from jpu.events import LabAdded, TokenIssued, TokenRevoked, UserAdded, UserRemoved


class IdentitiesProjection:
    name = "identities"
    tables: tuple[str, ...] = ("api_tokens", "users", "labs")  # emptied in this order (FKs)

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        e = d.event
        if isinstance(e, LabAdded):
            await conn.execute(
                "INSERT INTO labs (name, created_at) VALUES ($1, to_timestamp($2)) "
                "ON CONFLICT DO NOTHING",
                e.lab,
                e.ts,
            )
        elif isinstance(e, UserAdded):
            await conn.execute(
                "INSERT INTO users (name, lab, role, max_active_jobs, created_at) "
                "VALUES ($1, $2, $3, $4, to_timestamp($5)) ON CONFLICT DO NOTHING",
                e.user,
                e.lab,
                e.role,
                e.max_active_jobs,
                e.ts,
            )
        elif isinstance(e, UserRemoved):
            await conn.execute(
                "UPDATE users SET removed_at = coalesce(removed_at, to_timestamp($2)) "
                "WHERE name = $1",
                e.user,
                e.ts,
            )
        elif isinstance(e, TokenIssued):
            await conn.execute(
                'INSERT INTO api_tokens (token_hash, "user", created_at) '
                "VALUES ($1, $2, to_timestamp($3)) ON CONFLICT DO NOTHING",
                e.token_digest,
                e.user,
                e.ts,
            )
        elif isinstance(e, TokenRevoked):
            await conn.execute(
                "UPDATE api_tokens SET revoked_at = coalesce(revoked_at, to_timestamp($2)) "
                "WHERE token_hash = $1",
                e.token_digest,
                e.ts,
            )


projection = IdentitiesProjection()
