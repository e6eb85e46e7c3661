"""Read the log from NATS for the explanations (jpu.explain.wait, usage, queue_at): the I/O
beside the pure explain package, on the bus side.

Bounded reads: a job's wait folds from the newest snapshot taken before its submission (issue
11's object store; else from seq 1) to its last event when it ended, or to the log's end while
it is in flight; the queue at a past moment folds from the newest snapshot whose last event is
not after that moment. The answers are the pure modules'; this module only chooses where to
start and where to stop reading.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable

import msgspec
import nats.errors

from jpu.bus.client import EventBus
from jpu.bus.model import Delivered
from jpu.bus.snapshots import SnapshotStore
from jpu.config import Config
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.codec import assign
from jpu.domain.states import job_view
from jpu.events import decode
from jpu.explain.queue_at import PastQueue, queue_at
from jpu.explain.usage import Ledger
from jpu.explain.wait import JobNotInLog, WaitFold, WaitTimeline

log = logging.getLogger(__name__)


def _fresh(config: Config) -> ClusterState:
    return ClusterState.new(config, keep_ended=False)


async def start_state(bus: EventBus, config: Config, last_seq: int) -> ClusterState:
    """The fold at the newest valid snapshot covering at most `last_seq`, else empty (seq 0)."""
    state = _fresh(config)
    if not config.snapshots or last_seq < 1:
        return state
    store = SnapshotStore.configured(bus.js, bus.stream, config)
    found = await store.load(config, last_seq, at_or_before=True)
    if found is not None:
        assign(state, found[1])  # drops ended jobs, as the services' fold does
    return state


async def _events(bus: EventBus, start: int, end: int | None) -> AsyncIterator[Delivered]:
    """The log from `start` to `end` (inclusive; None: to its end now), in order."""
    reader = bus.replay(start_seq=start)
    async with contextlib.aclosing(reader) as events:
        async for d in events:
            if end is not None and d.seq > end:
                return
            yield d


async def job_span(bus: EventBus, job_id: str) -> tuple[int, int | None]:
    """(seq of the job's submission, seq of its last event if it ended for good, else None)."""
    own = await bus.job_events(job_id)
    job = job_view(own)
    if job is None:
        raise JobNotInLog(job_id)
    ended = job.terminal and not job.oom_pending  # S2 (X8: an OOM retry may still come)
    return job.submit_seq, own[-1].seq if ended else None


_BATCH = 2048  # events folded per hand-off to the worker thread


async def _fold_off_loop(
    events: AsyncIterator[Delivered],
    apply: Callable[[Delivered], None],
    done: Callable[[], bool] = lambda: False,
) -> None:
    """Apply `events` in a worker thread, a batch at a time, until `done`: a long fold (a wait
    of weeks, a past queue) keeps the caller's event loop (the gateway's) answering meanwhile."""

    def apply_all(batch: list[Delivered]) -> None:
        for d in batch:
            if done():
                return
            apply(d)

    batch: list[Delivered] = []
    async for d in events:
        batch.append(d)
        if len(batch) >= _BATCH:
            await asyncio.to_thread(apply_all, batch)
            batch = []
            if done():
                return
    if batch:
        await asyncio.to_thread(apply_all, batch)


async def read_wait(bus: EventBus, config: Config, job_id: str, now: float) -> WaitTimeline:
    submit_seq, end_seq = await job_span(bus, job_id)
    state = await start_state(bus, config, submit_seq - 1)
    fold = WaitFold(job_id, config, state=state, half_life_s=config.half_life_s)
    await _fold_off_loop(_events(bus, state.seq + 1, end_seq), fold.apply, lambda: fold.done)
    return fold.result(now)


async def read_ledger(bus: EventBus, book: Ledger | None = None) -> Ledger:
    """Every charge of the log with what it paid for: a lab's usage is the sum of all its
    charges ever, each decayed (F3), so the ledger reads from seq 1 — or, given one, extends
    it with the log's tail (the gateway keeps one and pays for the whole log once)."""
    book = book if book is not None else Ledger()
    async for d in bus.replay(start_seq=book.seq + 1):
        book.apply(d)
    return book


async def _event_ts(bus: EventBus, seq: int) -> float | None:
    try:
        msg = await bus.js.get_msg(bus.stream, seq)
        return decode(msg.data or b"").ts
    except (nats.errors.Error, msgspec.DecodeError, msgspec.ValidationError) as e:
        log.warning("event at seq %d unreadable (%r): snapshot not used", seq, e)
        return None


async def read_queue_at(bus: EventBus, config: Config, at: float) -> PastQueue:
    state = _fresh(config)
    if config.snapshots:
        store = SnapshotStore.configured(bus.js, bus.stream, config)
        with contextlib.suppress(nats.errors.Error, TimeoutError):
            for seq in await store.seqs():  # newest first: the first not after `at`
                ts = await _event_ts(bus, seq)
                if ts is not None and ts <= at:
                    state = await start_state(bus, config, seq)
                    break
    reader = bus.replay(start_seq=state.seq + 1, until_ts=at)  # the prefix fold_until takes
    async with contextlib.aclosing(reader) as events:
        await _fold_off_loop(events, lambda d: evolve(state, d))
    return await asyncio.to_thread(queue_at, state, at, config, config.half_life_s)
