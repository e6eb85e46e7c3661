"""Rebuild projections from seq 1 (SPEC E3, E6): one read of the log for all of them, the live
path's apply (jpu.store.projection), one transaction. What `python -m jpu.tools.replay` runs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, cast

import asyncpg

from jpu.bus.model import Delivered
from jpu.bus.ordered import follow_ordered, sequences
from jpu.store.faults import TRANSIENT, Fault, record_faults
from jpu.store.projection import (
    Projection,
    _apply_fast,
    _apply_isolated,
    _lock_positions,
    _save_positions,
    decode_batch,
)

if TYPE_CHECKING:
    from jpu.bus import EventBus

# A rebuild folds this many events in memory per write of each row it touches (the live path
# takes what one fetch brings).
REBUILD_CHUNK: Final = 8192


async def _reset(conn: asyncpg.Connection, projection: Projection) -> None:
    reset = getattr(projection, "reset", None)
    if reset is not None:
        await reset(conn)
    else:
        for table in projection.tables:
            await conn.execute(f"DELETE FROM {table}")
    await conn.execute("DELETE FROM projection_faults WHERE projection = $1", projection.name)


async def _rebuild_chunk(
    conn: asyncpg.Connection,
    projections: Sequence[Projection],
    positions: dict[str, int],
    chunk: Sequence[Delivered],
    upto: Mapping[str, int] | None,
    undecodable: Sequence[Fault] = (),
) -> dict[str, int]:
    """The live path's apply inside the rebuild's transaction: fast, or isolated on a failure."""
    limit = upto or {}
    await record_faults(
        conn, [f for f in undecodable if f.seq <= limit.get(f.projection, f.seq)]
    )  # fmt: skip
    try:
        async with conn.transaction():  # a savepoint: a failing chunk is redone isolated
            return (await _apply_fast(conn, projections, positions, chunk, upto))[0]
    except TRANSIENT:
        raise
    except Exception:
        after, _, faults = await _apply_isolated(conn, projections, positions, chunk, upto)
        await record_faults(conn, faults)
        return after


async def rebuild_many(
    bus: EventBus,
    pool: asyncpg.Pool,
    projections: Sequence[Projection],
    *,
    until_ts: float | None = None,
    until_seqs: Mapping[str, int | None] | None = None,
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Empty `projections` and replay them from seq 1 — one read of the log for all of them, the
    live path's apply, one transaction (readers never see them half-built; live appliers wait on
    the tracking rows). `until_seqs[name]` stops a projection at that seq. Returns each one's
    last seq. An event one cannot apply is recorded in `projection_faults` (as live), never a
    crash (SPEC E6)."""
    limits = {p.name: (until_seqs or {}).get(p.name) for p in projections}
    upto = {name: seq for name, seq in limits.items() if seq is not None}
    stop_at = None if len(upto) < len(limits) else max(upto.values(), default=0)
    names = [p.name for p in projections]
    async with pool.acquire() as proxy, proxy.transaction():
        conn = cast(asyncpg.Connection, proxy)
        before = await _lock_positions(conn, names)
        for p in projections:
            await _reset(conn, p)
        positions = dict.fromkeys(names, 0)
        end = await bus.last_seq()  # the log as it is now (a rebuild never chases it)
        if stop_at is not None:
            end = min(end, stop_at)
        last = 0
        async for chunk, bad in _read_log(bus, end, until_ts, names):
            positions = await _rebuild_chunk(conn, projections, positions, chunk, upto, bad)
            last = max([last, *(d.seq for d in chunk), *(f.seq for f in bad)])
            if progress is not None:
                progress(last)
        for name in names:  # read through here (events of other kinds included)
            positions[name] = max(positions[name], min(last, upto.get(name, last)))
        await _save_positions(conn, before, positions)
        if progress is not None:
            progress(last)
        return positions


async def _read_log(
    bus: EventBus, end: int, until_ts: float | None, names: Sequence[str]
) -> AsyncGenerator[tuple[list[Delivered], list[Fault]], None]:
    """The log from seq 1 to `end` (stopping before the first event after `until_ts`) in
    decoded chunks of up to REBUILD_CHUNK, through the live path's ordered reader."""
    if end < 1:
        return
    stop = asyncio.Event()
    reader = follow_ordered(
        bus.js, bus.stream, f"{bus.prefix}.>", 1, stop, batch=REBUILD_CHUNK
    )  # fmt: skip
    async with contextlib.aclosing(reader) as batches:
        async for msgs in batches:
            inside = msgs
            if sequences(msgs[-1])[0] > end:  # in stream order: only the last batch is cut
                inside = [m for m in msgs if sequences(m)[0] <= end]
            chunk, bad = decode_batch(inside, names)
            if until_ts is not None and any(d.event.ts > until_ts for d in chunk):
                cut = next(d.seq for d in chunk if d.event.ts > until_ts)
                chunk = [d for d in chunk if d.seq < cut]
                bad = [f for f in bad if f.seq < cut]
                stop.set()
            if chunk or bad:
                yield chunk, bad
            meta = msgs[-1].metadata
            if stop.is_set() or meta.sequence.stream >= end or meta.num_pending == 0:
                return


async def rebuild(
    bus: EventBus,
    pool: asyncpg.Pool,
    projection: Projection,
    *,
    until_ts: float | None = None,
    until_seq: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """One projection alone (see rebuild_many); returns the last seq applied."""
    done = await rebuild_many(
        bus, pool, (projection,), until_ts=until_ts,
        until_seqs={projection.name: until_seq}, progress=progress,
    )  # fmt: skip
    return done[projection.name]
