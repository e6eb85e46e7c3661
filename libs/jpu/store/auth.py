"""Labs, users and bearer tokens (SPEC §1.3, §8 Auth). Tables in store/migrations/0100_auth.sql.

A token is 32 random bytes (URL-safe base64). Only its sha256 hex digest is stored; a request's
token is hashed and looked up by digest, so the database never holds a usable secret and the
comparison is over digests. Demo tokens (`demo-<user>`) exist only when seeded explicitly.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from jpu.domain import limits

Role = Literal["user", "lab_admin", "admin"]
ROLES: Final[tuple[Role, ...]] = ("user", "lab_admin", "admin")
DEMO_TOKEN_PREFIX: Final = "demo-"

Db = asyncpg.Pool | asyncpg.Connection | PoolConnectionProxy  # anything that can run SQL


class AuthError(ValueError):
    """An admin operation that cannot be done (unknown lab or user, bad role); message says why."""


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller."""

    name: str
    lab: str
    role: Role
    max_active_jobs: int | None  # None: the configured default applies (SPEC §1.3)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def may_see_lab(self, lab: str) -> bool:
        """A lab's own accounts (its usage explained, charge by charge) are for its members
        (users and lab_admins of that lab) and admins (SPEC F5, §8 FORBIDDEN otherwise)."""
        return self.is_admin or self.lab == lab


def new_token() -> str:
    return secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def demo_token(user: str) -> str:
    """The well-known token of a demo user. Demo only: anyone reading the README knows it."""
    return f"{DEMO_TOKEN_PREFIX}{user}"


def _principal(row: Any) -> Principal:
    return Principal(row["name"], row["lab"], cast(Role, row["role"]), row["max_active_jobs"])


async def authenticate(db: Db, token: str) -> Principal | None:
    """The user holding this (unrevoked) token, or None."""
    if not token:
        return None
    row = await db.fetchrow(
        """SELECT u.name, u.lab, u.role, u.max_active_jobs
             FROM api_tokens t JOIN users u ON u.name = t."user"
            WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND u.removed_at IS NULL""",
        hash_token(token),
    )
    return None if row is None else _principal(row)


async def add_lab(db: Db, name: str) -> bool:
    """Create a lab; False if it already existed."""
    why = limits.name_problem("lab", name)  # a NATS subject token; storable text
    if why:
        raise AuthError(f"{why}, not {limits.printable(name)!r}")
    status = await db.execute("INSERT INTO labs (name) VALUES ($1) ON CONFLICT DO NOTHING", name)
    return bool(status.endswith(" 1"))


async def add_user(
    db: Db, name: str, lab: str, role: str = "user", max_active_jobs: int | None = None
) -> bool:
    """Create a user in an existing lab; False if the user already existed (left unchanged)."""
    why = limits.name_problem("user", name) or limits.name_problem("lab", lab)
    if why:
        raise AuthError(f"{why} (user {limits.printable(name)!r}, lab {limits.printable(lab)!r})")
    if role not in ROLES:
        raise AuthError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if max_active_jobs is not None and max_active_jobs < 0:
        raise AuthError("max_active_jobs must be >= 0")
    if await db.fetchval("SELECT 1 FROM labs WHERE name = $1", lab) is None:
        raise AuthError(f"unknown lab {lab!r} (add it first: jpu-admin lab add {lab})")
    status = await db.execute(
        """INSERT INTO users (name, lab, role, max_active_jobs) VALUES ($1, $2, $3, $4)
           ON CONFLICT DO NOTHING""",
        name,
        lab,
        role,
        max_active_jobs,
    )
    return bool(status.endswith(" 1"))


async def get_user(db: Db, name: str) -> Principal | None:
    """The user, unless unknown or removed."""
    row = await db.fetchrow(
        "SELECT name, lab, role, max_active_jobs FROM users WHERE name = $1 AND removed_at IS NULL",
        name,
    )
    return None if row is None else _principal(row)


async def list_users(db: Db) -> list[tuple[Principal, int]]:
    """Every user (not removed) with the number of active (unrevoked) tokens, by lab then name."""
    rows = await db.fetch(
        """SELECT u.name, u.lab, u.role, u.max_active_jobs,
                  count(t.token_hash) FILTER (WHERE t.revoked_at IS NULL) AS tokens
             FROM users u LEFT JOIN api_tokens t ON t."user" = u.name
            WHERE u.removed_at IS NULL
            GROUP BY u.name ORDER BY u.lab, u.name"""
    )
    return [(_principal(r), int(r["tokens"])) for r in rows]


async def _require_user(db: Db, user: str) -> None:
    why = limits.name_problem("user", user)
    if why:
        raise AuthError(f"{why}, not {limits.printable(user)!r}")
    removed = await db.fetchval("SELECT removed_at IS NOT NULL FROM users WHERE name = $1", user)
    if removed is None:
        raise AuthError(f"unknown user {user!r}")
    if removed:
        raise AuthError(f"user {user!r} was removed")


async def install_token(db: Db, user: str, token: str) -> None:
    """Store the hash of a given token for `user` (idempotent; used for demo tokens). A token
    once revoked stays revoked (SPEC SEC3): installing it again changes nothing."""
    await _require_user(db, user)
    await db.execute(
        """INSERT INTO api_tokens (token_hash, "user") VALUES ($1, $2)
           ON CONFLICT (token_hash) DO NOTHING
        """,
        hash_token(token),
        user,
    )


async def create_token(db: Db, user: str) -> str:
    """A new random token for `user`; the caller shows it once, only its hash is kept."""
    await _require_user(db, user)
    token = new_token()
    await db.execute(
        'INSERT INTO api_tokens (token_hash, "user") VALUES ($1, $2)', hash_token(token), user
    )
    return token


async def revoke_tokens(db: Db, user: str) -> int:
    """Revoke every active token of `user`; returns how many were revoked."""
    await _require_user(db, user)
    status = await db.execute(
        'UPDATE api_tokens SET revoked_at = now() WHERE "user" = $1 AND revoked_at IS NULL',
        user,
    )
    return int(status.split()[-1])


async def remove_user(pool: asyncpg.Pool, user: str) -> int:
    """Revoke the user's tokens and mark the user removed, atomically; returns the tokens
    revoked. The row stays (removed_at): the log's jobs and charges name the user, and the audit
    must still resolve the name, its lab and its tokens' dates. A removed user cannot
    authenticate, get a token, or be re-added under the same name."""
    async with pool.acquire() as conn, conn.transaction():
        revoked = await revoke_tokens(conn, user)
        await conn.execute("UPDATE users SET removed_at = now() WHERE name = $1", user)
        return revoked


async def rotate_token(pool: asyncpg.Pool, user: str) -> str:
    """Revoke the user's tokens and issue a new one, atomically."""
    async with pool.acquire() as conn, conn.transaction():
        await revoke_tokens(conn, user)
        return await create_token(conn, user)
