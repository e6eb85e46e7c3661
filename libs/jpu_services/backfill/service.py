"""The backfill service (SPEC §6 B1–B5, M2, E4): LLM instances on idle GPUs, always yielding.

    run_backfill(bus, config, backend, clock, stop, options)

It follows the log into a ClusterState (replay from seq 1, then live) plus a Tracker (idle
since, running instances). Each round, on an event that can change a GPU or maintenance, or
every `poll_s`:
  1. instances that are gone → BackfillEnded (preempted | reclaimed | exited | failed);
  2. plan (policy core): GPUs `free` ≥ settle_s get one instance each (B1, B3); in
     BACKFILL_RECOVERY/ACTIVE all are reclaimed (M2); reserved GPUs keep theirs, get none (R2);
  3. cancel what must go: reclaimed (M2), or on a GPU a research job holds (B2 — the slurm-agent
     normally ended it before launching; this is the safety net);
  4. start what the plan says: submit (idempotent per deterministic backfill id), then append
     BackfillStarted on the node's subject with its expected last sequence (E2). Once the live
     state leaves NORMAL/DRAINING mid-round, nothing more is launched (M2); an instance already
     launched is still recorded — it exists — so the next round reclaims it and ACTIVE (M3,
     decided on the log) never comes while it runs. B2 against a concurrent dispatch (the two
     subjects never conflict, E2): a GPU that left the idle period its start was planned for
     gets no instance, and the fold catches up before each BackfillStarted; a dispatch that
     still lands first in log order makes that start one `to_cancel` preempts at once.

Exactly once: the backfill id is derived from (GPU, stream seq at which it became free), so two
replicas or a restart deciding on the same log submit the same instance (the backend's submit is
idempotent) and append the same event (same msg id); a writer that decided on a stale view gets
ConcurrencyConflict, re-reads and decides again, cancelling an instance it launched for nothing.
On start, instances the backend runs that the log does not record are cancelled (orphans of a
crash between submit and append); instances the log records are re-adopted by the backend.
Backfill is never charged (B5): nothing here emits usage, and accounting ignores these events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from jpu.backends import UnknownBackendJob
from jpu.backends.backfill_contract import BackfillBackend, BackfillHandle, BackfillSpec
from jpu.bus import ConcurrencyConflict, Delivered, EventBus
from jpu.bus.fold_follow import Follower, SnapshotPolicy, caught_up
from jpu.config import Config
from jpu.domain.backfill_decisions import (
    EndReason,
    end_reason,
    ended,
    may_launch,
    plan,
    started,
    still_idle,
    to_cancel,
)
from jpu.domain.cluster import ClusterState
from jpu.domain.idle import WAKE_EVENTS, GpuKey, Idle, Tracker, backfill_id
from jpu.events import BackfillEnded, BackfillStarted, subject_for
from jpu.policy.model import Gpu
from jpu.runtime.clock import Clock
from jpu.runtime.metrics import announce_backfill, count_preemption
from jpu.runtime.service import wait_any
from jpu_services.backfill.options import BackfillOptions, BackfillStats

log = logging.getLogger(__name__)
__all__ = ["BackfillOptions", "BackfillService", "BackfillStats", "run_backfill"]
_CATCH_UP_S = 10.0  # a fold that cannot catch up: the round is retried (run)


class BackfillService:
    def __init__(
        self,
        bus: EventBus,
        config: Config,
        backend: BackfillBackend,
        clock: Clock,
        options: BackfillOptions,
        stats: BackfillStats | None = None,
    ) -> None:
        self.bus, self.config, self.backend, self.clock = bus, config, backend, clock
        self.options, self.stats = options, stats or BackfillStats()
        self.state = ClusterState.new(config, keep_ended=False)  # SPEC O6
        self.tracker = Tracker(self.state)
        self.wake = asyncio.Event()
        self.follower = Follower(
            bus, self.state, self._on_event, snapshots=SnapshotPolicy.from_config(bus, config)
        )
        self.pending: dict[str, BackfillHandle] = {}  # launched, BackfillStarted not yet seen
        self.requested: dict[str, EndReason] = {}  # cancels we asked for, by backfill id
        self.expected: dict[str, int] = {}  # subject → expected last seq within a round
        self.max_seq = 0

    def _on_event(self, d: Delivered) -> None:
        self.tracker.on_event(d)
        if isinstance(d.event, WAKE_EVENTS):
            self.wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        announce_backfill(t.name for t in self.config.tiers)  # SPEC O4: at 0 from the start
        await self.follower.restore()  # SPEC O6: the newest snapshot, then only the tail
        follow = asyncio.create_task(self.follower.run(stop), name="backfill-follow")
        try:
            await caught_up(self.follower, "backfill")
            self.tracker.refresh(self.clock.now(), 0)  # GPUs free since before any event
            await self._cancel_orphans()
            while not stop.is_set():
                await wait_any(self.options.poll_s, stop, self.wake)
                if stop.is_set():
                    break
                self.wake.clear()
                try:
                    await self.follower.wait_for(self.max_seq)  # our own appends are in
                    await self.round()
                except TimeoutError:
                    log.warning("backfill: state did not catch up with the log; retrying")
        finally:
            follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follow

    async def round(self) -> None:
        self.expected.clear()
        self.stats.rounds += 1
        now = self.clock.now()
        if not await self._record_ends(now):
            return
        p = plan(self.tracker, now, self.options.settle_s)
        await self._cancel(to_cancel(self.state, p))
        # the idle period each start was planned for: the fold moves on during the launches
        planned = {_key(g): self.tracker.idle[_key(g)] for g in p.start}
        wanted = {backfill_id(_key(g), planned[_key(g)].seq): g for g in p.start}
        if self.options.enabled:
            for bf, gpu in wanted.items():
                if not await self._start(bf, gpu, planned[_key(gpu)], now):
                    break
        await self._drop_unwanted(set(wanted) if self.options.enabled else set())

    # --- 1. ends --------------------------------------------------------------------------------

    async def _record_ends(self, now: float) -> bool:
        caught_up = False
        for bf, start in list(self.tracker.instances.items()):
            try:
                status = await self.backend.poll_backfill(start.backend_job_id or "")
            except UnknownBackendJob:
                status = None  # the backend lost it (restarted elsewhere): it is gone
            if status is not None and not status.terminal:
                continue
            if not caught_up:  # the dispatch it was preempted for must be in the state
                await self.follower.catch_up()
                caught_up = True
            if bf not in self.tracker.instances:
                continue  # another replica recorded its end meanwhile
            reason = end_reason(self.state, start, status, self.requested)
            if not await self._append(ended(start, reason, now)):
                return False
            self.requested.pop(bf, None)
            self.stats.ended += 1
            if reason == "preempted":
                count_preemption(start.tier)  # SPEC O4
            log.info("backfill %s on %s/%s#%d ended: %s", bf, *_where(start), reason)
        return True

    # --- 3. cancel ------------------------------------------------------------------------------

    async def _cancel(self, cancels: dict[str, EndReason]) -> None:
        for bf, reason in cancels.items():
            start = self.tracker.instances.get(bf)
            if bf in self.requested or start is None:
                continue
            self.requested[bf] = reason
            with contextlib.suppress(UnknownBackendJob):
                await self.backend.cancel_backfill(start.backend_job_id or "", self.options.grace_s)
            log.info("backfill %s: cancel (%s)", bf, reason)

    # --- 4. start -------------------------------------------------------------------------------

    async def _start(self, bf: str, gpu: Gpu, idle: Idle, now: float) -> bool:
        """Launch (idempotent), then record; False when the node's subject moved (re-decide).

        B2: a dispatch folded while this round launched (the GPU left its planned idle period)
        wins the GPU: nothing is launched, or the instance is dropped unrecorded. Before the
        record the fold catches up with the log, so only a dispatch appended in the last instant
        can precede our BackfillStarted in log order; `to_cancel` preempts that one at once."""
        key = _key(gpu)
        handle = self.pending.get(bf)
        if handle is None and not may_launch(self.tracker, key, idle):
            return True  # maintenance moved on (M2) or the GPU was taken, during earlier launches
        if handle is None:
            spec = BackfillSpec(  # no partition: the tier's is the research one; the backend
                # knows its preemptible one (Slurm: `llm`, B2)
                backfill_id=bf,
                node=gpu.node,
                tier=gpu.tier,
                gpu=gpu.index,
                command=self.options.command,
            )
            try:
                handle = await self.backend.submit_backfill(spec)
            except Exception:
                log.exception("backfill %s on %s/%s#%d: launch failed", bf, *key)
                return True
            self.pending[bf] = handle
        await self.follower.catch_up(timeout=_CATCH_UP_S)  # the dispatches in the log now
        if not still_idle(self.tracker, key, idle):
            return True  # a dispatch took the GPU while it spawned: dropped below
        if not await self._append(started(bf, gpu, handle.backend_job_id, handle.endpoint, now)):
            return False
        self.stats.started += 1
        log.info("backfill %s started on %s/%s#%d at %s", bf, *key, handle.endpoint)
        return True

    async def _drop_unwanted(self, wanted: set[str]) -> None:
        """Instances launched for a start the log no longer wants (a dispatch or another
        replica got there first, maintenance moved on): cancel them, record nothing."""
        for bf, handle in list(self.pending.items()):
            if bf in self.tracker.instances:  # recorded: the log tracks it from now on
                del self.pending[bf]
                continue
            if bf in wanted:
                continue  # still to be recorded (the append conflicted, or is in flight)
            del self.pending[bf]
            with contextlib.suppress(UnknownBackendJob):
                await self.backend.cancel_backfill(handle.backend_job_id, 0.0)
            log.info("backfill %s: launched but not recorded; cancelled", bf)

    async def _cancel_orphans(self) -> None:
        """After a restart: an instance the log does not record holds a GPU nobody knows of."""
        known = self.tracker.backend_ids()
        for bid in await self.backend.running_backfill():
            if bid not in known:
                log.warning("backfill instance %s is not in the log: cancelling it", bid)
                with contextlib.suppress(UnknownBackendJob):
                    await self.backend.cancel_backfill(bid, 0.0)

    # --- appends --------------------------------------------------------------------------------

    async def _append(self, event: BackfillStarted | BackfillEnded) -> bool:
        """E2 on the node's backfill subject; False (and a new round soon) on a conflict."""
        subject = subject_for(event, self.bus.prefix)
        expected = self.expected.get(subject, self.tracker.subject_seq.get(event.node, 0))
        try:
            seq = await self.bus.append(event, expected_last_subject_seq=expected)
        except ConcurrencyConflict:
            self.stats.conflicts += 1
            self.wake.set()
            return False
        self.expected[subject] = seq
        self.max_seq = max(self.max_seq, seq)
        return True


def _key(g: Gpu) -> GpuKey:
    return (g.node, g.tier, g.index)


def _where(start: BackfillStarted) -> tuple[str, str, int]:
    return start.node, start.tier, start.gpu


async def run_backfill(
    bus: EventBus,
    config: Config,
    backend: BackfillBackend,
    clock: Clock,
    stop: asyncio.Event,
    options: BackfillOptions,
    stats: BackfillStats | None = None,
) -> None:
    """Run until `stop` is set. The caller owns (and closes) the bus and the backend."""
    await BackfillService(bus, config, backend, clock, options, stats).run(stop)
