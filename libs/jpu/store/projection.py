"""Exactly-once projections, live (SPEC E3, O5); rebuilding them: jpu.store.rebuilding, the
events they could not apply: jpu.store.faults.

One transaction = the projections' row changes + their tracking rows `(projection, last_seq)`.
The tracking rows are locked FOR UPDATE first, so two projector instances serialise. The log is
read in order from the committed positions (jpu.bus.ordered), never through acknowledgements, so
`last_seq` always means "every event up to here applied": an event at or below it was applied,
and a batch that reaches the transaction again after a crash changes nothing.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from itertools import islice
from operator import lt
from typing import TYPE_CHECKING, Final, Protocol, cast, runtime_checkable

import asyncpg
import msgspec
from nats.aio.msg import Msg

from jpu.bus.model import Delivered
from jpu.bus.ordered import follow_ordered, sequences
from jpu.events import decode
from jpu.runtime.metrics import announce_projection, count_fault, sample_lag, sample_log_size
from jpu.store.faults import TRANSIENT, Fault, record_faults

if TYPE_CHECKING:
    from jpu.bus import EventBus

log = logging.getLogger(__name__)

NOTIFY_CHANNEL: Final = "jpu_projection"
_MAX_RETRY_DELAY_S: Final = 10.0
# The most events one live transaction takes: a projector that is behind (a start, a burst)
# applies what the reader has gathered, up to this many, in one go; one that keeps up sees
# small batches (whatever arrived), so this costs no latency.
LIVE_BATCH: Final = 4096


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


class _Retry(Exception):
    """Roll the transaction back and try again later (faults found, tries left)."""


class _Behind(Exception):
    """A projection's position is below the reader's start (a rebuild reset it): re-read."""


_LOCK: Final = (
    "SELECT projection, last_seq FROM projection_positions"
    " WHERE projection = ANY($1::text[]) ORDER BY projection FOR UPDATE"
)


async def _lock_positions(conn: asyncpg.Connection, names: Sequence[str]) -> dict[str, int]:
    """Lock the projections' tracking rows (in name order: no deadlock between two runners).
    The rows exist after a projection's first run, so the usual batch costs one statement."""
    ordered = sorted(set(names))
    rows = await conn.fetch(_LOCK, ordered)
    if len(rows) < len(ordered):  # a projection's first run: create its row at 0
        await conn.execute(
            "INSERT INTO projection_positions (projection, last_seq)"
            " SELECT unnest($1::text[]), 0 ON CONFLICT (projection) DO NOTHING",
            ordered,
        )
        rows = await conn.fetch(_LOCK, ordered)
    return {r["projection"]: int(r["last_seq"]) for r in rows}


def _fresh(batch: Sequence[Delivered], last: int, upto: int | None = None) -> list[Delivered]:
    """The events after `last` (up to `upto`), once each, in seq order."""
    seqs = [d.seq for d in batch]
    if all(map(lt, seqs, islice(seqs, 1, None))):  # the log's order (a rebuild's chunks): a slice
        lo = bisect.bisect_right(seqs, last)
        hi = len(seqs) if upto is None else bisect.bisect_right(seqs, upto)
        return list(batch[lo:hi])
    by_seq = {d.seq: d for d in batch if d.seq > last and (upto is None or d.seq <= upto)}
    return [by_seq[s] for s in sorted(by_seq)]


async def _apply_fast(
    conn: asyncpg.Connection,
    projections: Sequence[Projection],
    positions: dict[str, int],
    batch: Sequence[Delivered],
    upto: Mapping[str, int] | None = None,
) -> tuple[dict[str, int], int]:
    """Each projection applies the events after its position (and up to `upto[name]`, when
    given), in seq order (caller's tx). Returns the new positions and the number of
    (projection, event) applications."""
    new, count = dict(positions), 0
    for p in projections:
        fresh = _fresh(batch, positions[p.name], (upto or {}).get(p.name))
        if not fresh:
            continue
        apply_many = getattr(p, "apply_many", None)
        if apply_many is not None:
            await apply_many(conn, fresh)
        else:
            for d in fresh:
                await p.apply(conn, d)
        new[p.name], count = fresh[-1].seq, count + len(fresh)
    return new, count


async def _apply_isolated(
    conn: asyncpg.Connection,
    projections: Sequence[Projection],
    positions: dict[str, int],
    batch: Sequence[Delivered],
    upto: Mapping[str, int] | None = None,
) -> tuple[dict[str, int], int, list[Fault]]:
    """Like _apply_fast, but each (event, projection) in a savepoint of its own, so an event a
    projection cannot apply costs only that pair; transient errors propagate."""
    new, count, faults = dict(positions), 0, []
    for p in projections:
        for d in _fresh(batch, positions[p.name], (upto or {}).get(p.name)):
            try:
                async with conn.transaction():  # a savepoint inside the caller's transaction
                    await p.apply(conn, d)
                count += 1
            except TRANSIENT:
                raise
            except Exception as e:
                faults.append(Fault(p.name, d.seq, d.subject, type(d.event).__name__, repr(e)))
            new[p.name] = d.seq
    return new, count, faults


async def _save_positions(
    conn: asyncpg.Connection, before: dict[str, int], after: dict[str, int]
) -> None:
    """Save the positions that moved and notify each (`<name>:<last_seq>`, delivered at commit),
    all in one statement: a batch's five positions are one round trip, not ten."""
    moved = sorted(name for name in after if after[name] != before.get(name))
    if not moved:
        return
    await conn.execute(
        "WITH saved AS ("
        " UPDATE projection_positions p SET last_seq = v.last_seq"
        " FROM unnest($1::text[], $2::bigint[]) AS v(projection, last_seq)"
        " WHERE p.projection = v.projection RETURNING p.projection, p.last_seq)"
        " SELECT count(pg_notify($3, projection || ':' || last_seq)) FROM saved",
        moved,
        [after[name] for name in moved],
        NOTIFY_CHANNEL,
    )


async def apply_batch(pool: asyncpg.Pool, projection: Projection, batch: list[Delivered]) -> int:
    """Apply `batch` exactly once in ONE transaction (SPEC E3); returns how many were applied."""
    return (await apply_to_all(pool, (projection,), batch))[0]


async def apply_to_all(
    pool: asyncpg.Pool,
    projections: Sequence[Projection],
    batch: Sequence[Delivered],
    *,
    isolate: bool = False,
    record: bool = True,
    read: tuple[int, int] | None = None,
    undecodable: Sequence[Fault] = (),
) -> tuple[int, list[Fault]]:
    """One transaction: every projection applies the events of `batch` after its own position
    and saves it (SPEC E3). With `isolate`, an event a projection cannot apply becomes a Fault:
    recorded and skipped when `record`, else the transaction is rolled back (_Retry).

    `read = (first, last)`: the batch is the whole of the log from `first` to `last` (an ordered
    reader's), so every projection ends at `last` at least; a projection whose position is below
    `first - 1` would get a gap: _Behind, nothing applied."""
    async with pool.acquire() as proxy, proxy.transaction():
        conn = cast(asyncpg.Connection, proxy)  # the pool's proxy forwards everything
        before = await _lock_positions(conn, [p.name for p in projections])
        if read is not None and min(before.values()) + 1 < read[0]:
            raise _Behind(min(before.values()))
        faults: list[Fault] = []
        if isolate:
            after, count, faults = await _apply_isolated(conn, projections, before, batch)
            if faults and not record:
                raise _Retry(faults)
        else:
            after, count = await _apply_fast(conn, projections, before, batch)
        faults += [f for f in undecodable if f.seq > before[f.projection]]
        await record_faults(conn, faults)
        if read is not None:
            after = {name: max(seq, read[1]) for name, seq in after.items()}
        await _save_positions(conn, before, after)
        return count, faults


def decode_batch(msgs: Sequence[Msg], names: Sequence[str]) -> tuple[list[Delivered], list[Fault]]:
    """Decode messages; an undecodable one is a Fault of every projection in `names`."""
    ok: list[Delivered] = []
    bad: list[Fault] = []
    for m in msgs:
        seq = sequences(m)[0]
        try:
            ok.append(Delivered(seq, m.subject, decode(m.data), dict(m.headers or {})))
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            bad += [Fault(n, seq, m.subject, "?", f"undecodable: {e}") for n in names]
    return ok, bad


class _Runner:
    """One ordered read of the log feeding every projection of a process (SPEC E3, O5)."""

    def __init__(
        self,
        bus: EventBus,
        pool: asyncpg.Pool,
        projections: Sequence[Projection],
        stop: asyncio.Event,
        *,
        batch: int,
        max_tries: int,
        retry_delay_s: float,
        after_commit: AfterCommit | None,
    ) -> None:
        self.bus, self.pool, self.projections, self.stop = bus, pool, projections, stop
        self.batch, self.max_tries, self.retry_delay_s = batch, max_tries, retry_delay_s
        self.after_commit = after_commit
        self.names = [p.name for p in projections]

    async def run(self) -> None:
        while not self.stop.is_set():
            start = await self._start()
            if start is None:
                return
            reader = follow_ordered(
                self.bus.js,
                self.bus.stream,
                f"{self.bus.prefix}.>",
                start,
                self.stop,
                batch=self.batch,
            )
            try:
                async with contextlib.aclosing(reader) as batches:
                    async for msgs in batches:
                        await self._commit(start, msgs)
            except _Behind as e:
                log.warning(
                    "projections %s: a position moved back to %s; re-reading", self.names, e
                )

    async def _start(self) -> int | None:
        """The first seq some projection still needs (None when stopped first)."""
        failures = 0
        while not self.stop.is_set():
            try:
                async with self.pool.acquire() as proxy, proxy.transaction():
                    positions = await _lock_positions(cast(asyncpg.Connection, proxy), self.names)
                return min(positions.values()) + 1
            except TRANSIENT as e:
                failures += 1
                log.warning("projections %s: database unavailable (%r)", self.names, e)
                await _sleep_unless(self.stop, self._delay(failures))
        return None

    def _delay(self, failures: int) -> float:
        return float(min(self.retry_delay_s * 2 ** max(failures - 1, 0), _MAX_RETRY_DELAY_S))

    async def _commit(self, start: int, msgs: Sequence[Msg]) -> None:
        """Apply one batch (the log from `start` through it was read); retried until it
        commits or `stop` is set."""
        delivered, undecodable = decode_batch(msgs, self.names)
        read = (start, msgs[-1].metadata.sequence.stream)
        failures = transient = 0
        while not self.stop.is_set():
            try:
                _, faults = await apply_to_all(
                    self.pool,
                    self.projections,
                    delivered,
                    isolate=failures > 0,
                    record=failures >= self.max_tries - 1,
                    read=read,
                    undecodable=undecodable,
                )
            except _Behind:
                raise
            except TRANSIENT as e:
                transient += 1
                log.warning("projections %s: database unavailable (%r); retrying", self.names, e)
                await _sleep_unless(self.stop, self._delay(transient))
                continue
            except Exception as e:  # the event (or a bug) and not the database: isolate it
                failures += 1
                log.warning(
                    "projections %s: batch seq %d..%d failed (%d/%d): %r",
                    self.names,
                    msgs[0].metadata.sequence.stream,
                    msgs[-1].metadata.sequence.stream,
                    failures,
                    self.max_tries,
                    e,
                )
                await _sleep_unless(self.stop, self._delay(failures))
                continue
            for f in faults:
                count_fault(f.projection)
                log.error(
                    "projection %s could not apply seq %d (%s %s): %s — recorded in"
                    " projection_faults; /readyz reports degraded",
                    f.projection,
                    f.seq,
                    f.event_type,
                    f.subject,
                    f.error,
                )
            if self.after_commit is not None:
                await self.after_commit(read[1])
            return


async def run_projections(
    bus: EventBus,
    pool: asyncpg.Pool,
    projections: Sequence[Projection],
    *,
    stop: asyncio.Event,
    batch: int = LIVE_BATCH,
    max_tries: int = 5,
    retry_delay_s: float = 0.5,
    after_commit: AfterCommit | None = None,
    lag_every_s: float = 5.0,
) -> None:
    """Keep `projections` applied in stream order, exactly once, with no gap (SPEC E3, O5).

    The positions in PostgreSQL are the only truth of what was applied: the log is read in order
    from the lowest of them + 1 (jpu.bus.ordered), and each batch is one transaction in which
    every projection applies what lies after its own position. Nothing is acked, so a crash at
    any moment just means the next run reads again from the committed positions. A failing
    batch is retried with backoff; past `max_tries` the event a projection cannot apply is
    recorded in `projection_faults` (an alarm: log, metric, /readyz) and the others go on.
    `after_commit(last_seq)` runs after each commit (crash tests). Every `lag_every_s` each
    projection's lag behind the stream is measured (SPEC O4).
    """
    runner = _Runner(
        bus,
        pool,
        projections,
        stop,
        batch=batch,
        max_tries=max_tries,
        retry_delay_s=retry_delay_s,
        after_commit=after_commit,
    )

    def lag_of(name: str) -> Callable[[], Awaitable[int]]:
        async def lag() -> int:
            return max(await bus.last_seq() - await last_applied(pool, name), 0)

        return lag

    await _drop_legacy_durables(bus, runner.names)
    for name in runner.names:
        announce_projection(name)  # SPEC O4: jpu.projection.faults at 0 from the start
    samplers = [
        asyncio.create_task(sample_lag(name, lag_of(name), stop, lag_every_s))
        for name in runner.names
    ]
    samplers.append(
        asyncio.create_task(sample_log_size(bus.stream, bus.stream_bytes, stop, lag_every_s))
    )
    try:
        await _until_stopped(runner.run(), stop)
    finally:
        for t in samplers:
            t.cancel()
        await asyncio.gather(*samplers, return_exceptions=True)


async def _drop_legacy_durables(bus: EventBus, names: Sequence[str]) -> None:
    """Earlier versions followed through acked durables `proj-<name>`; they only pile up now."""
    for name in names:
        with contextlib.suppress(Exception):
            await bus.js.delete_consumer(bus.stream, f"proj-{name}")


async def run_projection(
    bus: EventBus,
    pool: asyncpg.Pool,
    projection: Projection,
    *,
    stop: asyncio.Event,
    batch: int = LIVE_BATCH,
    after_commit: AfterCommit | None = None,
    lag_every_s: float = 5.0,
) -> None:
    """One projection alone (see run_projections)."""
    await run_projections(
        bus,
        pool,
        (projection,),
        stop=stop,
        batch=batch,
        after_commit=after_commit,
        lag_every_s=lag_every_s,
    )


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


async def _until_stopped(work: Awaitable[None], stop: asyncio.Event, grace_s: float = 2.0) -> None:
    """Run `work` until it returns, or until `stop` + `grace_s` (then cancel it): a reader
    blocked on an unreachable NATS or database must not hold a shutdown. Cancelling is safe
    at any point: an open transaction rolls back and the positions say where to resume."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait({task}, timeout=grace_s)
        if not task.done():
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being cancelled ourselves, not just our work
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
