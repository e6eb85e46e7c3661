"""The dispatcher: follow the log, hold the lease, run the cycle (SPEC §4, E4, M2/M3, X8).

    run_dispatcher(bus, config, clock, stop)

Every copy follows the log into its own ClusterState (replay from seq 1, then live). Only the
holder of the lease acts. A cycle runs every `cycle_s` and, coalesced to `min_cycle_gap_s`, as
soon as an event that can change its outcome arrives (D8). Before a cycle the leader waits until
its state includes its own previous appends, so it never decides twice on the same facts.

Cycle phases:
  0. duties — end cancelled queued jobs (R5), OOM escalation (X8), maintenance steps (M2/M3)
  1–4. the policy cycle on the snapshot at clock.now() (D3), decisions appended per job with
     optimistic concurrency (writer.py)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from jpu.bus import Delivered, EventBus
from jpu.bus.fold_follow import Follower, SnapshotPolicy, caught_up
from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.domain.dispatch import TRIGGERS, cycle_events, duties, snapshot
from jpu.policy.cycle import cycle
from jpu.runtime.clock import Clock
from jpu.runtime.metrics import (
    announce_dispatcher,
    count_leading,
    observing_queue,
    record_cycle,
)
from jpu.runtime.service import wait_any
from jpu_services.dispatcher.estimates import Estimator
from jpu_services.dispatcher.lease import Lease
from jpu_services.dispatcher.view import ViewPublisher
from jpu_services.dispatcher.writer import LeaseLost, Writer

log = logging.getLogger(__name__)


@dataclass
class DispatcherStats:
    cycles: int = 0
    dispatched: int = 0
    appended: int = 0
    conflicts: int = 0
    leader: bool = False
    # the log seq the last complete cycle decided on (its view's `seq`): a test waits for a cycle
    # that saw an event, then asserts what it did (or did not) decide, with no sleep
    decided_seq: int = 0
    cycle_ms: deque[float] = field(default_factory=lambda: deque(maxlen=2048))


@dataclass
class Dispatcher:
    bus: EventBus
    config: Config
    clock: Clock
    state: ClusterState
    follower: Follower
    lease: Lease
    writer: Writer
    stats: DispatcherStats
    wake: asyncio.Event
    view: ViewPublisher
    estimator: Estimator

    async def run_cycle(self) -> None:
        now = self.clock.now()
        self.writer.begin()
        if not await self.writer.append_all(duties(self.state, self.config, now)):
            self.wake.set()  # the state moved under us: decide again once caught up
            return
        seen = self.state.seq
        result = cycle(snapshot(self.state, self.config), now)
        before = self.writer.appended
        tiers = {t.name: t for t in self.config.tiers}
        ok = await self.writer.append_all(cycle_events(result, tiers, now))
        await self.view.publish(now, self.state.seq, result.order, dict(result.pending.items()))
        self.stats.dispatched += sum(1 for _ in result.dispatches) if ok else 0
        if not ok:
            self.wake.set()
        else:
            self.stats.decided_seq = seen
        if self.writer.appended > before:
            log.debug("cycle appended %d events", self.writer.appended - before)


def _triggered(wake: asyncio.Event) -> Callable[[Delivered], None]:
    def on_event(d: Delivered) -> None:
        if isinstance(d.event, TRIGGERS):
            wake.set()

    return on_event


async def run_dispatcher(
    bus: EventBus,
    config: Config,
    clock: Clock,
    stop: asyncio.Event,
    *,
    holder: str | None = None,
    lease_ttl_s: float = 3.0,
    lease_renew_s: float = 1.0,
    stats: DispatcherStats | None = None,
) -> None:
    state = ClusterState.new(config, keep_ended=False)  # SPEC O6: in-flight jobs only
    announce_dispatcher(t.name for t in config.tiers)  # SPEC O4: its counters at 0 from the start
    wake = asyncio.Event()
    follower = Follower(
        bus,
        state,
        _triggered(wake),
        snapshots=SnapshotPolicy.from_config(bus, config),
    )
    lease = Lease(bus.js, f"dispatcher.{bus.stream}", holder, lease_ttl_s, lease_renew_s)
    view = ViewPublisher(bus)
    d = Dispatcher(
        bus,
        config,
        clock,
        state,
        follower,
        lease,
        Writer(bus, state, lease.valid),
        stats or DispatcherStats(),
        wake,
        view,
        Estimator(config, state, view),
    )
    await follower.restore()  # SPEC O6: the newest snapshot, then only the log's tail
    tasks = [asyncio.create_task(follower.run(stop)), asyncio.create_task(lease.run(stop))]
    try:
        await caught_up(follower, "dispatcher")
        with observing_queue(state.jobs):  # SPEC O4
            await _loop(d, stop)
    finally:
        await d.estimator.stop()
        for t in tasks:
            t.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*tasks, return_exceptions=True)
        await lease.release()


async def _loop(d: Dispatcher, stop: asyncio.Event) -> None:
    last_cycle = float("-inf")
    leading = False
    while not stop.is_set():
        await wait_any(d.config.cycle_s, stop, d.wake, d.lease.changed)
        d.lease.changed.clear()
        if stop.is_set():
            return
        if not d.lease.valid():
            leading = d.stats.leader = False
            d.wake.clear()  # a standby only follows
            continue
        gap = d.config.min_cycle_gap_s - (time.monotonic() - last_cycle)
        if gap > 0:
            await asyncio.sleep(gap)  # D8: at most one cycle per min_cycle_gap_s
        d.wake.clear()
        try:
            if not leading:
                await d.follower.catch_up()  # include the previous leader's last appends
                leading = d.stats.leader = True
                log.info("leading", extra={"holder": d.lease.holder, "seq": d.state.seq})
                count_leading("dispatcher")  # SPEC O4: a start or a failover (E4)
            else:
                await d.follower.wait_for(d.writer.max_seq)  # our own appends are in the state
            t0 = time.perf_counter()
            await d.run_cycle()
            elapsed = time.perf_counter() - t0
            d.stats.cycle_ms.append(elapsed * 1000)
            record_cycle(elapsed)  # SPEC O4
            d.estimator.maybe_start(d.clock.now())  # U4: between cycles, simulated off the loop
        except LeaseLost:
            leading = d.stats.leader = False
            log.warning("lease lost: standing by")
        except TimeoutError:
            log.warning("state did not catch up with the log in time; retrying")
        last_cycle = time.monotonic()
        d.stats.cycles += 1
        d.stats.appended, d.stats.conflicts = d.writer.appended, d.writer.conflicts
