"""Lab usage (SPEC F3): per lab the stored `(value, as_of)` of the last UsageCharged, plus one
`usage_history` point per charge for the console's chart (U2). Readers decay to "now"; the value
itself is whatever accounting computed (`value_after`), so a replay reproduces it exactly (F5).
Labs with no row have usage 0 (F6)."""

from __future__ import annotations

from typing import Final

import asyncpg

from jpu.bus.model import Delivered
from jpu.events import UsageCharged

# Multi-row statements (unnest of arrays): one round trip per batch, however many charges.
_UPSERT: Final = (
    "INSERT INTO lab_usage (lab, value, as_of, updated_seq) "
    "SELECT * FROM unnest($1::text[], $2::float8[], $3::float8[], $4::bigint[]) "
    "ON CONFLICT (lab) DO UPDATE SET value = EXCLUDED.value, as_of = EXCLUDED.as_of, "
    "updated_seq = EXCLUDED.updated_seq"
)
_HISTORY: Final = (
    "INSERT INTO usage_history (seq, lab, as_of, value, amount, job_id, reason) "
    "SELECT * FROM unnest($1::bigint[], $2::text[], $3::float8[], $4::float8[], $5::float8[], "
    "$6::text[], $7::text[]) ON CONFLICT (seq) DO NOTHING"
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
        last = list(latest.items())
        await conn.execute(
            _UPSERT,
            [lab for lab, _ in last],
            [e.value_after for _, (_, e) in last],
            [e.as_of for _, (_, e) in last],
            [seq for _, (seq, _) in last],
        )
        await conn.execute(
            _HISTORY,
            [seq for seq, _ in charges],
            [e.lab for _, e in charges],
            [e.as_of for _, e in charges],
            [e.value_after for _, e in charges],
            [e.amount for _, e in charges],
            [e.job_id for _, e in charges],
            [e.reason for _, e in charges],
        )


projection = LabUsageProjection()
