"""Maintenance mode (SPEC §7): the single row `maintenance` from MaintenanceChanged.
No row means NORMAL (nothing ever changed); `read_maintenance` hides that detail."""

from __future__ import annotations

from typing import Any

import asyncpg

from jpu.bus.model import Delivered
from jpu.events import MaintenanceChanged

_UPSERT = (
    "INSERT INTO maintenance (id, state, since, message, by, updated_seq) "
    "VALUES (1, $1, $2, $3, $4, $5) ON CONFLICT (id) DO UPDATE SET state = EXCLUDED.state, "
    "since = EXCLUDED.since, message = EXCLUDED.message, by = EXCLUDED.by, "
    "updated_seq = EXCLUDED.updated_seq"
)


class MaintenanceProjection:
    name = "maintenance"
    tables: tuple[str, ...] = ("maintenance",)

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        await self.apply_many(conn, [d])

    async def apply_many(self, conn: asyncpg.Connection, batch: list[Delivered]) -> None:
        """Only the batch's last change shows: one write at most."""
        last = [d for d in batch if isinstance(d.event, MaintenanceChanged)][-1:]
        for d in last:
            e = d.event
            assert isinstance(e, MaintenanceChanged)
            await conn.execute(_UPSERT, e.state, e.ts, e.message, e.by, d.seq)


async def read_maintenance(conn: asyncpg.Connection | asyncpg.Pool) -> dict[str, Any]:
    """{state, since, message, by} — NORMAL since 0 when maintenance never changed (M5)."""
    row = await conn.fetchrow("SELECT state, since, message, by FROM maintenance WHERE id = 1")
    if row is None:
        return {"state": "NORMAL", "since": 0.0, "message": "", "by": ""}
    return dict(row)


projection = MaintenanceProjection()
