"""Exactly-once projections (SPEC E3, O5).

One transaction = the projection's row changes + its tracking row `(projection, last_seq)`.
The tracking row is locked FOR UPDATE first, so two projector instances serialise, and every
event with `seq <= last_seq` is skipped: a redelivery (crash between commit and ack) changes
nothing. The bus acks only after the handler (and so the commit) returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol, cast, runtime_checkable

import asyncpg

from jpu.bus.model import Delivered
from jpu.metrics import sample_lag

if TYPE_CHECKING:
    from jpu.bus import EventBus

NOTIFY_CHANNEL: Final = "jpu_projection"
REBUILD_CHUNK: Final = 512


@runtime_checkable
class Projection(Protocol):
    """A fold of the event log into PostgreSQL tables.

    Optional extras, looked up with getattr:
      `async def apply_many(conn, batch: list[Delivered]) -> None` — a batched fast path;
      `async def reset(conn) -> None` — what rebuild does instead of emptying `tables`.
    """

    name: str
    tables: tuple[str, ...]  # emptied by rebuild

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None: ...


AfterCommit = Callable[[int], Awaitable[None]]


async def _lock_position(conn: asyncpg.Connection, name: str) -> int:
    sql = "SELECT last_seq FROM projection_positions WHERE projection = $1 FOR UPDATE"
    last = await conn.fetchval(sql, name)
    if last is None:
        await conn.execute(
            "INSERT INTO projection_positions (projection, last_seq) VALUES ($1, 0)"
            " ON CONFLICT (projection) DO NOTHING",
            name,
        )
        last = await conn.fetchval(sql, name)
    return int(last)


async def _apply_locked(
    conn: asyncpg.Connection, projection: Projection, batch: Sequence[Delivered], last: int
) -> tuple[int, int]:
    """Apply the events after `last` in seq order (inside the caller's tx).

    Returns (new last seq, number applied)."""
    fresh: dict[int, Delivered] = {d.seq: d for d in batch if d.seq > last}
    if not fresh:
        return last, 0
    ordered = [fresh[s] for s in sorted(fresh)]
    apply_many = getattr(projection, "apply_many", None)
    if apply_many is not None:
        await apply_many(conn, ordered)
    else:
        for d in ordered:
            await projection.apply(conn, d)
    return ordered[-1].seq, len(ordered)


async def _save_position(conn: asyncpg.Connection, name: str, seq: int) -> None:
    await conn.execute(
        "UPDATE projection_positions SET last_seq = $2 WHERE projection = $1", name, seq
    )
    await conn.execute("SELECT pg_notify($1, $2)", NOTIFY_CHANNEL, f"{name}:{seq}")


async def apply_batch(pool: asyncpg.Pool, projection: Projection, batch: list[Delivered]) -> int:
    """Apply `batch` exactly once in ONE transaction (SPEC E3); returns how many were applied."""
    async with pool.acquire() as proxy, proxy.transaction():
        conn = cast(asyncpg.Connection, proxy)  # the pool's proxy forwards everything
        last = await _lock_position(conn, projection.name)
        new_last, count = await _apply_locked(conn, projection, batch, last)
        if count:
            await _save_position(conn, projection.name, new_last)
        return count


async def run_projection(
    bus: EventBus,
    pool: asyncpg.Pool,
    projection: Projection,
    *,
    stop: asyncio.Event,
    batch: int = 512,
    ack_wait_s: float = 30.0,
    after_commit: AfterCommit | None = None,
    lag_every_s: float = 5.0,
) -> None:
    """Follow the log with the durable `proj-<name>`; each batch is acked after its commit (O5).

    `after_commit(last_seq)` runs after the commit and before the ack (used by crash tests).
    Every `lag_every_s` the projection's lag behind the stream is measured (SPEC O4).
    """

    async def handle(delivered: list[Delivered]) -> None:
        await apply_batch(pool, projection, delivered)
        if after_commit is not None and delivered:
            await after_commit(max(d.seq for d in delivered))

    async def lag() -> int:
        return max(await bus.last_seq() - await last_applied(pool, projection.name), 0)

    sampler = asyncio.create_task(sample_lag(projection.name, lag, stop, lag_every_s))
    try:
        await bus.consume(
            f"proj-{projection.name}", handle, stop=stop, batch=batch, ack_wait_s=ack_wait_s
        )
    finally:
        sampler.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sampler


async def _reset(conn: asyncpg.Connection, projection: Projection) -> None:
    reset = getattr(projection, "reset", None)
    if reset is not None:
        await reset(conn)
    else:
        for table in projection.tables:
            await conn.execute(f"DELETE FROM {table}")


async def rebuild(
    bus: EventBus,
    pool: asyncpg.Pool,
    projection: Projection,
    *,
    until_ts: float | None = None,
    until_seq: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Empty the projection and replay it from seq 1 in one transaction (readers never see it
    half-built; live appliers wait on the tracking row). Returns the last seq applied."""
    async with pool.acquire() as proxy, proxy.transaction():
        conn = cast(asyncpg.Connection, proxy)
        await _lock_position(conn, projection.name)
        await _reset(conn, projection)
        last = 0
        chunk: list[Delivered] = []
        async with contextlib.aclosing(bus.replay(start_seq=1, until_ts=until_ts)) as events:
            async for d in events:
                if until_seq is not None and d.seq > until_seq:
                    break
                chunk.append(d)
                if len(chunk) >= REBUILD_CHUNK:
                    last, _ = await _apply_locked(conn, projection, chunk, last)
                    chunk = []
                    if progress is not None:
                        progress(last)
        last, _ = await _apply_locked(conn, projection, chunk, last)
        await _save_position(conn, projection.name, last)
        if progress is not None:
            progress(last)
        return last


async def last_applied(pool: asyncpg.Pool, name: str) -> int:
    last = await pool.fetchval(
        "SELECT last_seq FROM projection_positions WHERE projection = $1", name
    )
    return int(last or 0)


async def wait_applied(pool: asyncpg.Pool, name: str, seq: int, *, timeout: float = 5.0) -> None:
    """Read-your-writes: wait until projection `name` has applied `seq` (TimeoutError if not)."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        if await last_applied(pool, name) >= seq:
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"projection {name} did not reach seq {seq} within {timeout} s")
        await asyncio.sleep(min(delay, remaining))
        delay = min(delay * 2, 0.05)
