"""Keep a ClusterState equal to a prefix of the log: restore the newest snapshot (or start
from seq 1), replay the tail, then follow live.

One ordered consumption path per process (jpu.bus.ordered: an ephemeral, unacknowledged pull
consumer from `state.seq + 1` that never skips a message), so a service's state is always the
state of the log up to `state.seq`. With a SnapshotStore the follower also writes a snapshot every
`every_events` events or `every_s` seconds (SPEC O6), so the next start replays only the tail.
Catching up has no deadline: it logs its progress and says when it is done (`catch_up`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
from nats.aio.msg import Msg

from jpu.bus import Delivered, EventBus
from jpu.bus.ordered import follow_ordered
from jpu.bus.snapshots import SnapshotStore
from jpu.config import Cluster, Config
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.codec import assign, pack
from jpu.events import decode

log = logging.getLogger(__name__)

OnEvent = Callable[[Delivered], None]


@dataclass(frozen=True)
class SnapshotPolicy:
    """When a follower writes a snapshot (config: snapshot_every_events, snapshot_every_s)."""

    store: SnapshotStore
    cluster: Cluster
    every_events: int = 10_000
    every_s: float = 300.0

    @classmethod
    def from_config(cls, bus: EventBus, config: Config) -> SnapshotPolicy | None:
        if not config.snapshots:
            return None
        store = SnapshotStore.configured(bus.js, bus.stream, config)
        return cls(store, config, config.snapshot_every_events, config.snapshot_every_s)


class Follower:
    def __init__(
        self,
        bus: EventBus,
        state: ClusterState,
        on_event: OnEvent | None = None,
        batch: int = 512,
        snapshots: SnapshotPolicy | None = None,
    ) -> None:
        self.bus, self.state, self.on_event, self.batch = bus, state, on_event, batch
        self.snapshots = snapshots
        self.restored_from = 0  # the snapshot's seq the state started from (0: none)
        # Waiters keyed by the seq they wait for: an applied batch wakes only those it satisfies
        # (a Condition woke every waiter on every batch, each re-taking its lock in turn: with
        # hundreds of commands in flight that was most of the follower's time).
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._tickets = itertools.count()
        self._snap_seq, self._snap_at = 0, time.monotonic()
        self._saving: asyncio.Task[None] | None = None

    async def restore(self) -> int:
        """Load the newest valid snapshot into `state` (before `run`); returns its seq or 0."""
        if self.snapshots is None or self.state.seq > 0:
            return 0
        found = await self.snapshots.store.load(self.snapshots.cluster, await self.bus.last_seq())
        if found is None:
            return 0
        header, restored = found
        assign(self.state, restored)
        self.restored_from = self._snap_seq = header.seq
        log.info("state restored from the snapshot at seq %d", header.seq)
        return header.seq

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until `stop`, in stream order with no gap (jpu.bus.ordered)."""
        try:
            await self._follow(stop)
        finally:
            if self._saving is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._saving, 10.0)

    async def _follow(self, stop: asyncio.Event) -> None:
        reader = follow_ordered(
            self.bus.js,
            self.bus.stream,
            f"{self.bus.prefix}.>",
            self.state.seq + 1,
            stop,
            batch=self.batch,
        )
        async with contextlib.aclosing(reader) as batches:
            async for msgs in batches:
                await self._apply([(m.metadata.sequence.stream, m.subject, m) for m in msgs])

    async def _apply(self, msgs: list[tuple[int, str, Msg]]) -> None:
        for seq, subject, msg in msgs:
            if seq <= self.state.seq:
                continue
            try:
                event = decode(msg.data)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                log.warning("follower: skip undecodable seq=%d %s: %s", seq, subject, e)
                self.state.seq = seq
                continue
            d = Delivered(seq, subject, event, dict(msg.headers or {}))
            evolve(self.state, d)
            if self.on_event is not None:
                self.on_event(d)
        self._wake_waiters()
        self._maybe_snapshot()

    def _wake_waiters(self) -> None:
        waiters, seq = self._waiters, self.state.seq
        while waiters and waiters[0][0] <= seq:
            fut = heapq.heappop(waiters)[2]
            if not fut.done():  # a waiter that timed out was cancelled
                fut.set_result(None)

    def _maybe_snapshot(self) -> None:
        p = self.snapshots
        if p is None or (self._saving is not None and not self._saving.done()):
            return
        fresh = self.state.seq - self._snap_seq
        due = fresh >= p.every_events or (
            fresh > 0 and time.monotonic() - self._snap_at >= p.every_s
        )
        if not due:
            return
        self._snap_seq, self._snap_at = self.state.seq, time.monotonic()
        data = pack(self.state, self.bus.stream, time.time())  # now: the state moves on
        self._saving = asyncio.create_task(self._save(p, data, self.state.seq))

    async def _save(self, p: SnapshotPolicy, data: bytes, seq: int) -> None:
        try:
            newest = next(iter(await p.store.seqs()), 0)
            if seq - newest < p.every_events // 2 and newest <= seq:
                return  # another service wrote one moments ago
            await p.store.put(data, seq)
            log.info("snapshot written at seq %d (%d bytes)", seq, len(data))
        except Exception as e:  # a snapshot is an optimisation: never stop following for it
            log.warning("snapshot at seq %d not written: %r", seq, e)

    async def wait_for(self, seq: int, timeout: float = 10.0) -> None:
        """Until the state has applied `seq` (TimeoutError otherwise)."""
        if self.state.seq >= seq:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (seq, next(self._tickets), fut))
        try:
            async with asyncio.timeout(timeout):
                await fut
        finally:
            if not fut.done():  # timed out or cancelled: dropped once the log reaches its seq
                fut.cancel()

    async def catch_up(self, timeout: float | None = None, *, progress_s: float = 5.0) -> int:
        """Until the state has applied everything in the log now; returns that seq.

        Without `timeout` there is no deadline (a long replay must never turn into a restart
        from zero, SPEC O6): progress is logged every `progress_s` (events/s, remaining)."""
        last = await self.bus.last_seq()
        if timeout is not None:
            await self.wait_for(last, timeout)
            return last
        t0, seq0 = time.monotonic(), self.state.seq
        while self.state.seq < last:
            with contextlib.suppress(TimeoutError):
                await self.wait_for(last, progress_s)
            if self.state.seq < last:
                rate = (self.state.seq - seq0) / max(time.monotonic() - t0, 1e-9)
                left = (last - self.state.seq) / rate if rate > 0 else float("inf")
                log.info(
                    "catching up: seq %d of %d (%.0f events/s, ~%.0f s left)",
                    self.state.seq,
                    last,
                    rate,
                    left,
                )
        return last


async def caught_up(follower: Follower, service: str) -> int:
    """Catch up without a deadline, then say so: the service's readiness line (SPEC O6)."""
    t0, start = time.monotonic(), follower.state.seq
    last = await follower.catch_up()
    log.info(
        "%s ready: caught up to seq %d in %.1f s (%d events replayed%s)",
        service,
        last,
        time.monotonic() - t0,
        max(last - start, 0),
        f", from the snapshot at seq {follower.restored_from}" if follower.restored_from else "",
    )
    return last
