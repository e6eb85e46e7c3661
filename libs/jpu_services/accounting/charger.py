"""Accounting's edge: append every charge the log owes exactly once (SPEC F3–F5, O5). Which
charges are owed is decided in jpu.domain.accounting, what each UsageCharged says in
jpu.policy.charging (the simulator's too); this module appends them.

Sources of charges, each turned into one `UsageCharged` on the lab's subject:
  * `JobEnded` — the attempt's whole uncharged cost (`usage`, F4), reason "job_end";
  * `ReservationReleased(charged_now=True)` — R3 demotion, M1 maintenance, R5 capacity;
  * the configured starting usage of a lab (`labs[].usage`, reason "initial"), once.

Exactly once, even with several replicas or a restart mid-stream:
  * the charge's event_id is derived from its source (`chg-<source event_id>`, `init-<lab>`),
    so the stream de-duplicates a repeated append (Nats-Msg-Id), and the fold remembers every
    charge id ever appended (so it holds beyond the de-duplication window);
  * the append expects the lab subject's last sequence the charge was computed on: a charge
    computed on a stale `(value, as_of)` is refused (ConcurrencyConflict), re-read, re-decided;
  * an append NATS does not acknowledge (it died or restarts) is retried with the same event,
    so the same msg id, until it is (EventBus.append_retrying): the service waits for NATS
    instead of exiting, and the charge lands once (SPEC O5).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable

from jpu.bus import ConcurrencyConflict, Delivered, EventBus
from jpu.bus.errors import is_unreachable
from jpu.bus.fold_follow import Follower
from jpu.domain.accounting import owed_by, unsettled
from jpu.domain.cluster import ClusterState
from jpu.events import UsageCharged
from jpu.policy.charging import Charge, usage_charged
from jpu.policy.fairshare import ZERO_USAGE

log = logging.getLogger(__name__)


class Charger:
    """Turns pending charges into UsageCharged events, in source order, exactly once."""

    def __init__(
        self,
        bus: EventBus,
        state: ClusterState,
        follower: Follower,
        half_life_s: float,
        stop: asyncio.Event | None = None,
    ):
        self.bus, self.state, self.follower, self.half_life_s = bus, state, follower, half_life_s
        self.stop = stop  # ends the retries of an unacknowledged append (shutdown)
        self.pending: dict[str, Charge] = {}
        self.appended = 0
        self.conflicts = 0

    def observe(self, d: Delivered) -> None:
        if isinstance(d.event, UsageCharged):
            self.pending.pop(d.event.event_id, None)
            return
        c = owed_by(self.state, d.event.event_id)
        if c is not None:
            self.pending[c.charge_id] = c

    def add(self, charges: list[Charge]) -> None:
        self.pending.update((c.charge_id, c) for c in unsettled(self.state, charges))

    async def drain(self) -> None:
        """Append every pending charge; on a conflict catch up and decide again."""
        while self.pending:
            cid, c = next(iter(self.pending.items()))
            if cid in self.state.charged_ids:
                self.pending.pop(cid, None)
                continue
            try:
                seq = await self._append(c)
            except ConcurrencyConflict:
                self.conflicts += 1
                await self._while_unreachable(self.follower.catch_up)
                continue
            # the next charge of this lab builds on it
            await self._while_unreachable(functools.partial(self.follower.wait_for, seq))
            self.pending.pop(cid, None)

    async def _while_unreachable(self, step: Callable[[], Awaitable[object]]) -> None:
        """`step` (reading the log back), repeated while NATS does not answer, until `stop`:
        an outage makes accounting wait, never exit (SPEC O5)."""
        while True:
            try:
                await step()
                return
            except Exception as e:
                if not is_unreachable(e) or (self.stop is not None and self.stop.is_set()):
                    raise
                log.warning("waiting for the log", extra={"error": repr(e)})
            await asyncio.sleep(0.5)

    async def _append(self, c: Charge) -> int:
        event = usage_charged(c, self.state.usage.get(c.lab, ZERO_USAGE), self.half_life_s)
        expected = self.state.lab_seq.get(c.lab, 0)
        seq = await self.bus.append_retrying(
            event, expected_last_subject_seq=expected, stop=self.stop
        )
        self.appended += 1
        return seq
