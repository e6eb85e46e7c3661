"""Durable pull consumer: at-least-once, ack after the handler, park what cannot be processed.

SPEC O5: a consumer killed at any moment loses nothing — unacked messages are redelivered to the
next instance of the same durable; projections make redelivery harmless (SPEC E3).

Ordering, while an instance runs: one batch in flight per durable (max_ack_pending = batch),
handed over in stream order. When the handler fails on a batch, the consumer keeps the batch and
isolates the culprit itself: one message at a time, in order, retried with backoff up to
`max_deliver` attempts, then parked. So a transient failure never lets a later event overtake an
earlier one, and a poison message costs only itself. After an instance dies holding a batch,
JetStream redelivers its messages as their ack deadlines pass, and the in-progress keepalives
may have left those deadlines staggered (the process died part-way through a round): the next
instance gets every one of them, not necessarily in order. Its user, the slurm-agent, decides on
fresh reads of a job's events, so that order does not matter to it; the projections and the
services' folds read through the ordered reader (ordered.py), which keeps stream order always.
A message that arrives already delivered more than `max_deliver` times (a handler that crashes
the process) is parked on arrival.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from jpu.bus import telemetry_hooks as hooks
from jpu.bus.dlq import park
from jpu.bus.errors import is_unreachable
from jpu.bus.model import Delivered
from jpu.bus.streams import consumer_defaults
from jpu.events import decode

log = logging.getLogger(__name__)

Handler = Callable[[list[Delivered]], Awaitable[None]]

_FETCH_TIMEOUT_S = 0.5  # also the latency of noticing `stop`
_MAX_RETRY_DELAY_S = 30.0


@dataclass(frozen=True)
class ConsumerSpec:
    stream: str
    prefix: str
    durable: str
    filter_subject: str
    batch: int
    max_deliver: int
    ack_wait_s: float
    retry_delay_s: float

    def config(self) -> ConsumerConfig:
        defaults = consumer_defaults()
        return ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            deliver_policy=DeliverPolicy.ALL,  # a new durable starts at sequence 1
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait_s,
            max_deliver=-1,  # we park ourselves past max_deliver; the server must not drop
            filter_subject=self.filter_subject,
            # One batch in flight per durable: redeliveries (after a nak or a crash) come back
            # before anything newer, so projections see the stream in order (SPEC E3, O5).
            max_ack_pending=self.batch,
            max_waiting=int(defaults.get("max_waiting", 64)),
        )

    def retry_delay(self, failures: int) -> float:
        return float(min(self.retry_delay_s * 2 ** max(failures - 1, 0), _MAX_RETRY_DELAY_S))


async def run_consumer(
    js: JetStreamContext, spec: ConsumerSpec, handler: Handler, stop: asyncio.Event
) -> None:
    while True:  # SPEC O3: a start during a leader election waits for the new leader
        try:
            await js.add_consumer(spec.stream, spec.config())  # create or update: idempotent
            break
        except Exception as e:
            if not is_unreachable(e) or stop.is_set():
                raise
            log.warning("consumer %s: not created yet (%r); retrying", spec.durable, e)
            await _sleep_unless(stop, 1.0)
    sub = await js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
    hooks.announce_consumer(spec.durable)  # SPEC O4: its counters at 0 from the start
    try:
        while not stop.is_set():
            try:
                msgs = await _fetch(sub, spec.batch)
            except nats.errors.ConnectionClosedError:
                raise
            except nats.errors.Error as e:  # reconnecting, leader change, consumer deleted...
                log.warning("consumer %s: fetch failed (%r); retrying", spec.durable, e)
                await _sleep_unless(stop, 1.0)
                with contextlib.suppress(nats.errors.Error):
                    await js.add_consumer(spec.stream, spec.config())
                continue
            ready = await _sort(js, spec, msgs) if msgs else []
            if ready:
                await _Batch(js, spec, handler, stop, ready).run()
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await js._nc.flush()  # push the last acks out before the caller drains


async def _fetch(sub: JetStreamContext.PullSubscription, n: int) -> list[Msg]:
    try:
        return await sub.fetch(n, timeout=_FETCH_TIMEOUT_S)
    except TimeoutError:  # nats.errors.TimeoutError or a bare asyncio one from fetch
        return []


async def _sort(
    js: JetStreamContext, spec: ConsumerSpec, msgs: list[Msg]
) -> list[tuple[Msg, Delivered]]:
    """Decode in stream order; park the undecodable and the over-delivered."""
    ready: list[tuple[Msg, Delivered]] = []
    for msg in msgs:
        meta = msg.metadata
        if meta.num_delivered > spec.max_deliver:
            failed = meta.num_delivered - 1
            reason = f"handler failed {failed} times (max_deliver={spec.max_deliver})"
            await _park(js, spec, msg, reason)
            continue
        try:
            event = decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            await _park(js, spec, msg, f"undecodable: {e}")
            continue
        seq = meta.sequence.stream
        ready.append((msg, Delivered(seq, msg.subject, event, dict(msg.headers or {}))))
    hooks.observe_lag(spec.durable, msgs[-1].metadata.num_pending)
    return ready


async def _park(js: JetStreamContext, spec: ConsumerSpec, msg: Msg, reason: str) -> None:
    await park(js, msg, prefix=spec.prefix, durable=spec.durable, reason=reason)
    hooks.count_parked(spec.durable)


class _Batch:
    """One fetched batch until every message is acked, parked or handed back."""

    def __init__(
        self,
        js: JetStreamContext,
        spec: ConsumerSpec,
        handler: Handler,
        stop: asyncio.Event,
        ready: list[tuple[Msg, Delivered]],
    ) -> None:
        self.js, self.spec, self.handler, self.stop = js, spec, handler, stop
        self.open = list(ready)  # not yet acked / parked / handed back, in stream order

    async def run(self) -> None:
        msgs = [m for m, _ in self.open]
        keepalive = asyncio.create_task(_keep_in_progress(msgs, self.spec.ack_wait_s / 2))
        try:
            if await self._attempt([d for _, d in self.open]) is None:
                await self._settle(len(self.open))
            else:
                await self._one_by_one()
        except asyncio.CancelledError:
            # Hand the rest back at once rather than after ack_wait (SPEC O5).
            await asyncio.shield(_nak_all([m for m, _ in self.open]))
            raise
        finally:
            keepalive.cancel()

    async def _attempt(self, batch: list[Delivered]) -> Exception | None:
        try:
            with hooks.consume_span(self.spec.durable, batch):
                await self.handler(batch)
        except Exception as e:
            log.warning(
                "consumer %s: handler failed on seq %d..%d: %r",
                self.spec.durable,
                batch[0].seq,
                batch[-1].seq,
                e,
            )
            return e
        return None

    async def _settle(self, n: int) -> None:
        for m, _ in self.open[:n]:
            await m.ack()
        hooks.count_consumed(self.spec.durable, n)
        del self.open[:n]

    async def _one_by_one(self) -> None:
        """Isolate the failure: each message alone, in order, with retries, then park."""
        if await _sleep_unless(self.stop, self.spec.retry_delay(1)):
            return await self._hand_back()
        while self.open:
            msg, d = self.open[0]
            delivered = msg.metadata.num_delivered  # earlier deliveries + the failed batch
            tries = max(self.spec.max_deliver - delivered, 1)
            failures, err = 1, await self._attempt([d])
            while err is not None and failures < tries:
                if await _sleep_unless(self.stop, self.spec.retry_delay(failures)):
                    return await self._hand_back()
                failures, err = failures + 1, await self._attempt([d])
            if err is None:
                await self._settle(1)
                continue
            total = delivered + failures
            reason = f"handler failed {total} times (max_deliver={self.spec.max_deliver}): {err!r}"
            await _park(self.js, self.spec, msg, reason)
            del self.open[0]

    async def _hand_back(self) -> None:
        """Stopping mid-retry: give the rest back to the durable, in order, for the next run."""
        await _nak_all([m for m, _ in self.open])
        self.open.clear()


async def _keep_in_progress(msgs: list[Msg], every_s: float) -> None:
    """A slow handler (or local retries) must not see its batch redelivered meanwhile."""
    while True:
        await asyncio.sleep(max(every_s, 0.05))
        for m in msgs:
            with contextlib.suppress(Exception):
                await m.in_progress()


async def _nak_all(msgs: list[Msg]) -> None:
    for m in msgs:
        with contextlib.suppress(Exception):
            await m.nak()


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> bool:
    """Sleep; True when `stop` was set (before or during)."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
