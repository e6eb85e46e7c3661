"""The notifier loop (SPEC Q10): follow the log in order, fold it through jpu.domain.notify,
record what each event owes in the sent-log, and send it — each notification on its own task,
so a receiver that is down (retried with bounded exponential backoff) never delays another
notification, another job's, or any other service (the notifier only reads the log).

    run_notifier(bus, pool, config, stop)

The fold is small (users' settings, jobs not ended yet) and rebuilt from the start of the log on
every start (jpu.bus.ordered); only events after the recorded position owe anything, so a
restart never sends a notification decided before it. A first start begins at the log's end:
jobs that ended before the notifier existed are not notified.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import asyncpg
import msgspec

from jpu.bus import EventBus
from jpu.bus.ordered import follow_ordered
from jpu.domain.notify import Notification, NotifyState, retry_delay, step
from jpu.events import decode
from jpu.runtime.service import wait_any
from jpu_services.notifier import sentlog
from jpu_services.notifier.channels import Channels, NotConfigured
from jpu_services.notifier.config import NotifierConfig
from jpu_services.notifier.sentlog import Due

log = logging.getLogger(__name__)


class Sender:
    """Sends every due notification of the sent-log, each on its own task."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        channels: Channels,
        config: NotifierConfig,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.pool, self.channels, self.config, self.clock = pool, channels, config, clock
        self.wake = asyncio.Event()
        self._inflight: dict[str, asyncio.Task[None]] = {}

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                self.wake.clear()
                for d in await sentlog.due(self.pool, self.clock(), list(self._inflight)):
                    if d.key not in self._inflight:
                        self._inflight[d.key] = asyncio.create_task(self._deliver(d))
                await wait_any(self.config.poll_s, self.wake, stop)
        finally:
            tasks = list(self._inflight.values())
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _deliver(self, d: Due) -> None:
        c = self.config
        try:
            await asyncio.wait_for(
                self.channels.send(d.channel, d.recipient, d.subject, d.body, d.key),
                c.send_timeout_s,
            )
        except Exception as e:  # any refusal: retried later, never raised into the loop
            tries = d.attempts + 1
            give_up = isinstance(e, NotConfigured) or tries >= c.max_attempts
            next_at = (
                None
                if give_up
                else self.clock() + retry_delay(tries, c.retry_base_s, c.retry_max_s)
            )
            log.warning(
                "notification not delivered",
                extra={"key": d.key, "attempt": tries, "error": repr(e), "abandoned": give_up},
            )
            await sentlog.mark_failed(self.pool, d, repr(e), next_at)
        else:
            await sentlog.mark_sent(self.pool, d, self.clock())  # after the receiver said yes
        finally:
            self._inflight.pop(d.key, None)


async def run_notifier(
    bus: EventBus, pool: asyncpg.Pool, config: NotifierConfig, stop: asyncio.Event
) -> None:
    channels = Channels(config)
    sender = Sender(pool, channels, config)
    tasks = [
        asyncio.create_task(_follow(bus, pool, config, sender, stop), name="follow"),
        asyncio.create_task(sender.run(stop), name="send"),
    ]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in done:  # a failure of either crashes the service: restarted, it resumes (O5)
            t.result()
    finally:  # a send cut short stays pending: sent again on the next start (at-least-once)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await channels.close()


async def _follow(
    bus: EventBus, pool: asyncpg.Pool, config: NotifierConfig, sender: Sender, stop: asyncio.Event
) -> None:
    decided = await sentlog.position(pool)
    if decided is None:  # first start: from now on (nothing of the past is notified)
        decided = await bus.last_seq()
        await sentlog.record(pool, [], decided, time.time())
    state = NotifyState()
    reader = follow_ordered(bus.js, bus.stream, f"{bus.prefix}.>", 1, stop)
    async with contextlib.aclosing(reader) as batches:
        async for msgs in batches:
            owed: list[Notification] = []
            for m in msgs:
                seq = m.metadata.sequence.stream
                try:
                    event = decode(m.data)
                except (msgspec.DecodeError, msgspec.ValidationError) as e:
                    log.warning("notifier: skip undecodable seq=%d: %s", seq, e)
                    continue
                notes = step(state, seq, event, config.console_url)
                if seq > decided:
                    owed.extend(notes)
            if owed:  # the position only matters where something is owed (the fold is pure)
                last = msgs[-1].metadata.sequence.stream
                await sentlog.record(pool, owed, last, time.time())
                decided = last
                sender.wake.set()
