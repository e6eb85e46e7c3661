"""Events a projection could not apply (SPEC E3, E6): recorded in `projection_faults`, never
skipped silently, listed by the audit replay; and the errors that are not the event's fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

import asyncpg


class Fault(NamedTuple):
    """An event one projection could not apply (recorded in `projection_faults`)."""

    projection: str
    seq: int
    subject: str
    event_type: str
    error: str


# Errors that say nothing about the event: the database is away or busy. Retried without limit,
# never recorded as a fault of the event.
TRANSIENT: Final = (
    OSError,
    TimeoutError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,  # a connection broken mid-operation
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.TransactionRollbackError,
    asyncpg.exceptions.InsufficientResourcesError,
)


async def record_faults(conn: asyncpg.Connection, faults: Sequence[Fault]) -> None:
    if faults:
        await conn.executemany(
            "INSERT INTO projection_faults (projection, seq, subject, event_type, error)"
            " VALUES ($1, $2, $3, $4, $5) ON CONFLICT (projection, seq) DO NOTHING",
            [tuple(f) for f in faults],
        )


async def faults(pool: asyncpg.Pool, projection: str | None = None) -> list[Fault]:
    """The events projections could not apply, oldest first."""
    rows = await pool.fetch(
        "SELECT projection, seq, subject, event_type, error FROM projection_faults"
        " WHERE $1::text IS NULL OR projection = $1 ORDER BY seq, projection",
        projection,
    )
    return [
        Fault(r["projection"], r["seq"], r["subject"], r["event_type"], r["error"]) for r in rows
    ]
