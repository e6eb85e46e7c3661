"""Who a bearer token belongs to (SPEC §1.3, §8 Auth), read from the `identities` projection
(tables in store/migrations/0100_auth.sql). The tables are a fold of the identity events
(SPEC SEC3: jpu.domain.identities decides them, jpu.tools.identities appends them): nothing here
writes them.

A token is 32 random bytes (URL-safe base64). Only its sha256 hex digest is in the log and the
tables; a request's token is hashed and looked up by digest, so neither holds a usable secret.
Demo tokens (`demo-<user>`) exist only when seeded explicitly (`make run`).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any, Final, cast

import asyncpg
from asyncpg.pool import PoolConnectionProxy

from jpu.domain.identities import ROLES, Role

__all__ = [
    "DEMO_TOKEN_PREFIX",
    "ROLES",
    "Principal",
    "Role",
    "authenticate",
    "demo_token",
    "get_user",
    "hash_token",
    "list_users",
    "new_token",
]

DEMO_TOKEN_PREFIX: Final = "demo-"

Db = asyncpg.Pool | asyncpg.Connection | PoolConnectionProxy  # anything that can run SQL


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
