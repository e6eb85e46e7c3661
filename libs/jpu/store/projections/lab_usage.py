"""Lab usage (SPEC F3): per lab the stored `(value, as_of)` of the last UsageCharged, plus one
`usage_history` point per charge for the console's chart (U2). Readers decay to "now"; the value
itself is whatever accounting computed (`value_after`), so a replay reproduces it exactly (F5).
Labs with no row have usage 0 (F6)."""

from __future__ import annotations

from typing import Final

import asyncpg

from jpu.bus.model import Delivered
from jpu.events import UsageCharged

_UPSERT: Final = (
    "INSERT INTO lab_usage (lab, value, as_of, updated_seq) VALUES ($1, $2, $3, $4) "
    "ON CONFLICT (lab) DO UPDATE SET value = EXCLUDED.value, as_of = EXCLUDED.as_of, "
    "updated_seq = EXCLUDED.updated_seq"
)
_HISTORY: Final = (
    "INSERT INTO usage_history (seq, lab, as_of, value, amount, job_id, reason) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (seq) DO NOTHING"
)


class LabUsageProjection:
    name = "lab_usage"
    tables: tuple[str, ...] = ("lab_usage", "usage_history")

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        await self.apply_many(conn, [d])

    async def apply_many(self, conn: asyncpg.Connection, batch: list[Delivered]) -> None:
        charges = [(d.seq, d.event) for d in batch if isinstance(d.event, UsageCharged)]
        if not charges:
            return
        latest: dict[str, tuple[int, UsageCharged]] = {}
        for seq, e in charges:  # batch is in seq order: the last charge per lab wins
            latest[e.lab] = (seq, e)
        await conn.executemany(
            _UPSERT, [(lab, e.value_after, e.as_of, seq) for lab, (seq, e) in latest.items()]
        )
        await conn.executemany(
            _HISTORY,
            [
                (seq, e.lab, e.as_of, e.value_after, e.amount, e.job_id, e.reason)
                for seq, e in charges
            ],
        )


projection = LabUsageProjection()
