"""Keep a ClusterState equal to a prefix of the log: replay from seq 1, then follow live.

One ordered consumption path per process (an ephemeral, unacknowledged pull consumer from
`state.seq + 1`), so a service's state is always the state of the log up to `state.seq`. If the
consumer disappears (server restart, inactivity) it is recreated from where the state is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import msgspec
import nats.errors
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.nuid import NUID

from jpu.bus import Delivered, EventBus
from jpu.events import decode
from jpu.fold import ClusterState, evolve

log = logging.getLogger(__name__)
_nuid = NUID()

OnEvent = Callable[[Delivered], None]


class Follower:
    def __init__(
        self, bus: EventBus, state: ClusterState, on_event: OnEvent | None = None, batch: int = 512
    ) -> None:
        self.bus, self.state, self.on_event, self.batch = bus, state, on_event, batch
        self._advanced = asyncio.Condition()

    async def run(self, stop: asyncio.Event) -> None:
        """Follow until `stop`; transient NATS errors recreate the consumer."""
        while not stop.is_set():
            try:
                await self._follow(stop)
            except (TimeoutError, nats.errors.Error, OSError) as e:
                log.warning("follower: %r; resubscribing from seq %d", e, self.state.seq + 1)
                await asyncio.sleep(0.2)

    async def _follow(self, stop: asyncio.Event) -> None:
        js = self.bus.js
        config = ConsumerConfig(
            name=_nuid.next().decode(),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self.state.seq + 1,
            ack_policy=AckPolicy.NONE,
            filter_subject=f"{self.bus.prefix}.>",
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        )
        info = await js.add_consumer(self.bus.stream, config)
        sub = await js.pull_subscribe_bind(consumer=info.name, stream=self.bus.stream)
        try:
            while not stop.is_set():
                try:
                    msgs = await sub.fetch(self.batch, timeout=0.5)
                except TimeoutError:  # nats raises its own and asyncio.TimeoutError
                    continue
                await self._apply([(m.metadata.sequence.stream, m.subject, m) for m in msgs])
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            with contextlib.suppress(Exception):
                await js.delete_consumer(self.bus.stream, info.name)

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
        async with self._advanced:
            self._advanced.notify_all()

    async def wait_for(self, seq: int, timeout: float = 10.0) -> None:
        """Until the state has applied `seq` (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout), self._advanced:
            await self._advanced.wait_for(lambda: self.state.seq >= seq)

    async def catch_up(self, timeout: float = 30.0) -> int:
        """Until the state has applied everything in the log now; returns that seq."""
        last = await self.bus.last_seq()
        await self.wait_for(last, timeout)
        return last
