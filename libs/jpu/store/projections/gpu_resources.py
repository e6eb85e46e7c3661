"""The GPU pool (SPEC §1.2): one row per physical GPU, state ∈ free | job:<id> | reserved:<id> |
backfill:<id> | down. Placements are `GROUP BY (node, tier)` of these rows (P1).

Every release is conditional on the holder (`WHERE state = 'job:<id>'`), so events that arrive
after a GPU changed hands (a backfill ended after a dispatch preempted it, a swap's release after
the dispatch) change nothing. A GPU released while unavailable (node down/drained, GPU missing)
becomes `down`, not `free`.
"""

from __future__ import annotations

from typing import Final

import asyncpg

from jpu.bus.model import Delivered
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobDispatched,
    JobEnded,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
)

_FREED: Final = "CASE WHEN available THEN 'free' ELSE 'down' END"
_TAKE: Final = (
    "UPDATE gpu_resources SET state = $4, updated_seq = $5 "
    "WHERE node = $1 AND tier = $2 AND index = ANY($3::int[])"
)
_RELEASE: Final = (
    f"UPDATE gpu_resources SET state = {_FREED}, updated_seq = $2 WHERE state = ANY($1::text[])"
)


def observed_state(state: str, *, ok: bool, lost: bool) -> str:
    """A GPU's state after an inventory observation: `ok` = present, up and undrained;
    `lost` = its node is down or the GPU itself failed (whatever ran there is gone)."""
    if ok:
        return "free" if state == "down" else state
    if lost or state == "free":
        return "down"
    return state  # drained or removed while held: becomes down when released


async def _inventory(conn: asyncpg.Connection, e: NodeInventoryObserved, seq: int) -> None:
    """P1: create rows for new GPUs; mark missing, failed or drained ones unavailable."""
    present = {(tier, i) for tier, n in e.gpus.items() for i in range(n)}
    failed = {(tier, i) for tier, idx in e.down.items() for i in idx}
    rows = await conn.fetch(
        "SELECT tier, index, state, available FROM gpu_resources WHERE node = $1", e.node
    )
    known = {(r["tier"], r["index"]): (r["state"], r["available"]) for r in rows}
    changes = []
    for key in sorted(present | set(known)):
        ok = e.state == "up" and key in present and key not in failed
        old_state, old_ok = known.get(key, ("down", False))
        state = observed_state(old_state, ok=ok, lost=e.state == "down" or key in failed)
        if key not in known or (state, ok) != (old_state, old_ok):
            changes.append((e.node, key[0], key[1], state, ok, seq))
    await conn.executemany(
        "INSERT INTO gpu_resources (node, tier, index, state, available, updated_seq) "
        "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (node, tier, index) DO UPDATE SET "
        "state = EXCLUDED.state, available = EXCLUDED.available, "
        "updated_seq = EXCLUDED.updated_seq",
        changes,
    )


async def _job_ended(conn: asyncpg.Connection, e: JobEnded, seq: int) -> None:
    """Free the ended attempt's GPUs (only those it names, when it names them: after an OOM
    retry the next attempt may already hold other GPUs) and any reservation left over."""
    await conn.execute(_RELEASE, [f"reserved:{e.job_id}"], seq)
    if e.node is not None and e.gpus:
        await conn.execute(
            _RELEASE + " AND node = $3 AND tier = $4 AND index = ANY($5::int[])",
            [f"job:{e.job_id}"],
            seq,
            e.node,
            e.tier,
            list(e.gpus),
        )
    else:
        await conn.execute(_RELEASE, [f"job:{e.job_id}"], seq)


class GpuResourcesProjection:
    name = "gpu_resources"
    tables: tuple[str, ...] = ("gpu_resources",)

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        e, seq = d.event, d.seq
        match e:
            case NodeInventoryObserved():
                await _inventory(conn, e, seq)
            case ReservationStarted() | ReservationGrown():  # R2: may cover a backfill (B4)
                await conn.execute(
                    _TAKE + " AND (state = 'free' OR state LIKE 'backfill:%' OR state = $4)",
                    e.node,
                    e.tier,
                    list(e.gpus),
                    f"reserved:{e.job_id}",
                    seq,
                )
            case ReservationReleased():
                await conn.execute(_RELEASE, [f"reserved:{e.job_id}"], seq)
            case ReservationShrunk():  # R5: only the lost GPUs, if still shown as reserved
                await conn.execute(
                    _RELEASE + " AND node = $3 AND tier = $4 AND index = ANY($5::int[])",
                    [f"reserved:{e.job_id}"],
                    seq,
                    e.node,
                    e.tier,
                    list(e.removed),
                )
            case JobDispatched():  # preempts backfill (B2); its own reserved GPUs become the job's
                await conn.execute(
                    _TAKE + " AND state <> 'down'",
                    e.node,
                    e.tier,
                    list(e.gpus),
                    f"job:{e.job_id}",
                    seq,
                )
            case JobEnded():
                await _job_ended(conn, e, seq)
            case BackfillStarted():  # backfill only ever takes a free GPU (B1)
                await conn.execute(
                    _TAKE + " AND state = 'free'",
                    e.node,
                    e.tier,
                    [e.gpu],
                    f"backfill:{e.backfill_id}",
                    seq,
                )
            case BackfillEnded():
                await conn.execute(_RELEASE, [f"backfill:{e.backfill_id}"], seq)


projection = GpuResourcesProjection()
