"""Live LLM backfill instances (SPEC §6 B1–B3, `GET /v1/backfill`): one row per instance from
BackfillStarted, marked ended by BackfillEnded.

Kept apart from gpu_resources, whose GPU row says who *holds* a GPU: a reservation may cover a
backfilled GPU while the instance keeps serving (R2, B4), and only the start event knows the
instance's endpoint and backend job.
"""

from __future__ import annotations

from typing import Any, Final

import asyncpg

from jpu.bus.model import Delivered
from jpu.events import BackfillEnded, BackfillStarted

_START: Final = (
    "INSERT INTO backfill_instances (backfill_id, node, tier, gpu, backend_job_id, endpoint, "
    "started_at, updated_seq) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
    "ON CONFLICT (backfill_id) DO NOTHING"  # an ended instance never comes back
)
_END: Final = (
    "UPDATE backfill_instances SET ended_at = $2, end_reason = $3, updated_seq = $4 "
    "WHERE backfill_id = $1 AND ended_at IS NULL"
)
_LIVE: Final = (
    "SELECT b.backfill_id, b.node, b.tier, b.gpu, b.backend_job_id, b.endpoint, b.started_at, "
    "g.state AS gpu_state FROM backfill_instances b LEFT JOIN gpu_resources g "
    "ON g.node = b.node AND g.tier = b.tier AND g.index = b.gpu "
    "WHERE b.ended_at IS NULL ORDER BY b.node, b.tier, b.gpu, b.backfill_id"
)


class BackfillProjection:
    name = "backfill"
    tables: tuple[str, ...] = ("backfill_instances",)

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        e = d.event
        if isinstance(e, BackfillStarted):
            await conn.execute(
                _START, e.backfill_id, e.node, e.tier, e.gpu, e.backend_job_id, e.endpoint, e.ts,
                d.seq,
            )  # fmt: skip
        elif isinstance(e, BackfillEnded):
            await conn.execute(_END, e.backfill_id, e.ts, e.reason, d.seq)


async def live_instances(conn: asyncpg.Connection | asyncpg.Pool) -> list[dict[str, Any]]:
    """Instances not ended, with their GPU's state now (free | reserved:<job> | … ) — by GPU."""
    return [dict(r) for r in await conn.fetch(_LIVE)]


projection = BackfillProjection()
