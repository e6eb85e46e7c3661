"""Accounting: charge every held GPU-second exactly once (SPEC F3–F5, O5).

Sources of charges, each turned into one `UsageCharged` on the lab's subject:
  * `JobEnded` — the attempt's whole uncharged cost (`usage`, F4), reason "job_end";
  * `ReservationReleased(charged_now=True)` — R3 demotion, M1 maintenance, R5 capacity;
  * the configured starting usage of a lab (`labs[].usage`, reason "initial"), once.

Exactly once, even with several replicas or a restart mid-stream:
  * the charge's event_id is derived from its source (`chg-<source event_id>`, `init-<lab>`),
    so the stream de-duplicates a repeated append (Nats-Msg-Id), and the fold remembers every
    charge id ever appended (so it holds beyond the de-duplication window);
  * the append expects the lab subject's last sequence the charge was computed on: a charge
    computed on a stale `(value, as_of)` is refused (ConcurrencyConflict), re-read, re-decided.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jpu.bus import ConcurrencyConflict, Delivered, EventBus
from jpu.config import Config
from jpu.events import ChargeReason, JobEnded, ReservationReleased, UsageCharged
from jpu.fold import ClusterState
from jpu.fold_follow import Follower
from jpu.policy.fairshare import ZERO_USAGE, charge

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Charge:
    charge_id: str
    lab: str
    amount: float
    at: float
    job_id: str | None
    reason: ChargeReason
    attempt: int | None = None


def charge_for(d: Delivered, state: ClusterState) -> Charge | None:
    """The charge a source event calls for (None: nothing to charge)."""
    e = d.event
    if isinstance(e, JobEnded):
        job = state.jobs.get(e.job_id)
        amount = e.usage or (e.gpu_seconds_run + e.gpu_seconds_reserved) * e.tflops
        if job is None or amount <= 0:
            return None
        return Charge(f"chg-{e.event_id}", job.lab, amount, e.ts, e.job_id, "job_end", e.attempt)
    if isinstance(e, ReservationReleased) and e.charged_now:
        job = state.jobs.get(e.job_id)
        amount = e.gpu_seconds * e.tflops  # F1
        if job is None or amount <= 0:
            return None
        reason: ChargeReason = "demoted"
        if e.reason in ("maintenance", "capacity"):
            reason = e.reason
        return Charge(f"chg-{e.event_id}", job.lab, amount, e.ts, e.job_id, reason, job.attempt)
    return None


def initial_charges(config: Config, at: float) -> list[Charge]:
    return [
        Charge(f"init-{lab.name}", lab.name, lab.usage, at, None, "initial")
        for lab in config.labs
        if lab.usage > 0
    ]


class Charger:
    """Turns pending charges into UsageCharged events, in source order, exactly once."""

    def __init__(self, bus: EventBus, state: ClusterState, follower: Follower, half_life_s: float):
        self.bus, self.state, self.follower, self.half_life_s = bus, state, follower, half_life_s
        self.pending: dict[str, Charge] = {}
        self.appended = 0
        self.conflicts = 0

    def observe(self, d: Delivered) -> None:
        if isinstance(d.event, UsageCharged):
            self.pending.pop(d.event.event_id, None)
            return
        c = charge_for(d, self.state)
        if c is not None and c.charge_id not in self.state.charged_ids:
            self.pending[c.charge_id] = c

    def add(self, charges: list[Charge]) -> None:
        for c in charges:
            if c.charge_id not in self.state.charged_ids:
                self.pending[c.charge_id] = c

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
                await self.follower.catch_up()
                continue
            await self.follower.wait_for(seq)  # the next charge of this lab builds on it
            self.pending.pop(cid, None)

    async def _append(self, c: Charge) -> int:
        usage = self.state.usage.get(c.lab, ZERO_USAGE)
        after = charge(usage, c.amount, c.at, self.half_life_s)  # F3
        event = UsageCharged(
            event_id=c.charge_id,
            ts=c.at,
            lab=c.lab,
            amount=c.amount,
            value_after=after.value,
            as_of=after.as_of,
            job_id=c.job_id,
            reason=c.reason,
            attempt=c.attempt,
        )
        expected = self.state.lab_seq.get(c.lab, 0)
        seq = await self.bus.append(event, expected_last_subject_seq=expected)
        self.appended += 1
        return seq
