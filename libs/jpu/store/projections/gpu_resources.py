"""The GPU pool (SPEC §1.2): one row per physical GPU, state ∈ free | job:<id> | reserved:<id> |
backfill:<id> | down. Placements are `GROUP BY (node, tier)` of these rows (P1).

Every release is conditional on the holder (`WHERE state = 'job:<id>'`), so events that arrive
after a GPU changed hands (a backfill ended after a dispatch preempted it, a swap's release after
the dispatch) change nothing. A GPU released while unavailable (node down/drained, GPU missing)
becomes `down`, not `free`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, NamedTuple

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

_LOAD: Final = (
    "SELECT node, tier, index, state, available, updated_seq FROM gpu_resources "
    "WHERE node = ANY($1::text[]) OR state = ANY($2::text[])"
)
_UPSERT: Final = (
    "INSERT INTO gpu_resources (node, tier, index, state, available, updated_seq) "
    "SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::bool[], "
    "$6::bigint[]) ON CONFLICT (node, tier, index) DO UPDATE SET state = EXCLUDED.state, "
    "available = EXCLUDED.available, updated_seq = EXCLUDED.updated_seq"
)

GpuKey = tuple[str, str, int]


class Gpu(NamedTuple):
    state: str
    available: bool
    updated_seq: int


def observed_state(state: str, *, ok: bool, lost: bool) -> str:
    """A GPU's state after an inventory observation: `ok` = present, up and undrained;
    `lost` = its node is down or the GPU itself failed (whatever ran there is gone)."""
    if ok:
        return "free" if state == "down" else state
    if lost or state == "free":
        return "down"
    return state  # drained or removed while held: becomes down when released


def _freed(gpu: Gpu, seq: int) -> Gpu:
    return Gpu("free" if gpu.available else "down", gpu.available, seq)


class _Pool:
    """The GPU rows a batch can touch, folded in memory; `changed` is written once at the end.

    Complete for the batch: a row an event addresses by node is loaded with its node, one it
    addresses by holder (`state`) either holds it at the batch's start (loaded by state) or
    came to hold it through an earlier event of the batch (loaded by that event's node)."""

    def __init__(self, rows: dict[GpuKey, Gpu]) -> None:
        self.rows = rows
        self.changed: set[GpuKey] = set()

    def _set(self, key: GpuKey, gpu: Gpu) -> None:
        self.rows[key] = gpu
        self.changed.add(key)

    def take(
        self, node: str, tier: str, gpus: list[int], tag: str, seq: int, ok: Callable[[str], bool]
    ) -> None:
        for i in gpus:
            gpu = self.rows.get((node, tier, i))
            if gpu is not None and ok(gpu.state):
                self._set((node, tier, i), Gpu(tag, gpu.available, seq))

    def release(
        self, tag: str, seq: int, where: tuple[str, str | None, list[int]] | None = None
    ) -> None:
        """Every GPU held by `tag` (only those of `where` = (node, tier, indexes), if given)
        becomes free, or down when unavailable."""
        if where is not None:
            node, tier, idx = where
            keys = [] if tier is None else [(node, tier, i) for i in idx]
        else:
            keys = [k for k, g in self.rows.items() if g.state == tag]
        for key in keys:
            gpu = self.rows.get(key)
            if gpu is not None and gpu.state == tag:
                self._set(key, _freed(gpu, seq))

    def inventory(self, e: NodeInventoryObserved, seq: int) -> None:
        """P1: create rows for new GPUs; mark missing, failed or drained ones unavailable."""
        present = {(tier, i) for tier, n in e.gpus.items() for i in range(n)}
        failed = {(tier, i) for tier, idx in e.down.items() for i in idx}
        known = {(k[1], k[2]): g for k, g in self.rows.items() if k[0] == e.node}
        for tier, i in sorted(present | set(known)):
            ok = e.state == "up" and (tier, i) in present and (tier, i) not in failed
            old = known.get((tier, i))
            old_state, old_ok = (old.state, old.available) if old is not None else ("down", False)
            lost = e.state == "down" or (tier, i) in failed
            state = observed_state(old_state, ok=ok, lost=lost)
            if old is None or (state, ok) != (old_state, old_ok):
                self._set((e.node, tier, i), Gpu(state, ok, seq))


def _apply(pool: _Pool, e: object, seq: int) -> None:
    match e:
        case NodeInventoryObserved():
            pool.inventory(e, seq)
        case ReservationStarted() | ReservationGrown():  # R2: may cover a backfill (B4)
            tag = f"reserved:{e.job_id}"
            pool.take(e.node, e.tier, list(e.gpus), tag, seq,
                      lambda s: s == "free" or s.startswith("backfill:") or s == tag)  # fmt: skip
        case ReservationReleased():
            pool.release(f"reserved:{e.job_id}", seq)
        case ReservationShrunk():  # R5: only the lost GPUs, if still shown as reserved
            pool.release(f"reserved:{e.job_id}", seq, (e.node, e.tier, list(e.removed)))
        case JobDispatched():  # preempts backfill (B2); its own reserved GPUs become the job's
            pool.take(e.node, e.tier, list(e.gpus), f"job:{e.job_id}", seq, lambda s: s != "down")
        case JobEnded():
            # Free the ended attempt's GPUs (only those it names, when it names them: after an
            # OOM retry the next attempt may already hold other GPUs) and any reservation left.
            pool.release(f"reserved:{e.job_id}", seq)
            if e.node is not None and e.gpus:
                pool.release(f"job:{e.job_id}", seq, (e.node, e.tier, list(e.gpus)))
            else:
                pool.release(f"job:{e.job_id}", seq)
        case BackfillStarted():  # backfill only ever takes a free GPU (B1)
            pool.take(e.node, e.tier, [e.gpu], f"backfill:{e.backfill_id}", seq,
                      lambda s: s == "free")  # fmt: skip
        case BackfillEnded():
            pool.release(f"backfill:{e.backfill_id}", seq)


def _touches(e: object) -> tuple[str | None, list[str]]:
    """The node an event addresses GPUs of, and the holders whose GPUs it may release."""
    match e:
        case NodeInventoryObserved():
            return e.node, []
        case ReservationStarted() | ReservationGrown() | JobDispatched() | BackfillStarted():
            return e.node, []
        case ReservationReleased() | ReservationShrunk():
            return None, [f"reserved:{e.job_id}"]
        case JobEnded():
            return None, [f"reserved:{e.job_id}", f"job:{e.job_id}"]
        case BackfillEnded():
            return None, [f"backfill:{e.backfill_id}"]
    return None, []


class GpuResourcesProjection:
    name = "gpu_resources"
    tables: tuple[str, ...] = ("gpu_resources",)

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        await self.apply_many(conn, [d])

    async def apply_many(self, conn: asyncpg.Connection, batch: list[Delivered]) -> None:
        """Load the rows the batch can touch, fold the batch in memory, write each changed row
        once (one round trip each way, however many events)."""
        nodes: set[str] = set()
        holders: set[str] = set()
        for d in batch:
            node, tags = _touches(d.event)
            if node is not None:
                nodes.add(node)
            holders.update(tags)
        if not nodes and not holders:
            return
        rows = await conn.fetch(_LOAD, sorted(nodes), sorted(holders))
        pool = _Pool(
            {(r["node"], r["tier"], r["index"]): Gpu(r["state"], r["available"], r["updated_seq"])
             for r in rows}
        )  # fmt: skip
        for d in batch:
            _apply(pool, d.event, d.seq)
        if pool.changed:
            keys = sorted(pool.changed)
            gpus = [pool.rows[k] for k in keys]
            await conn.execute(
                _UPSERT,
                [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
                [g.state for g in gpus], [g.available for g in gpus],
                [g.updated_seq for g in gpus],
            )  # fmt: skip


projection = GpuResourcesProjection()
