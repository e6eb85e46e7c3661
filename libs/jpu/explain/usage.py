"""What a lab's usage is made of, charge by charge, and a usage statement per period (SPEC F1–F5,
R3, R4). Pure: events in, a ledger out.

Every charge is a `UsageCharged` event (accounting's, decided by `jpu.policy.charging`); this
module never recomputes an amount. It only attaches to each charge what it paid for — the
attempt's run (GPU-seconds × the run tier's TFLOPS), the reservation time charged with it (R4,
F4) or at release (R3, M1, R5), from the charge's source event (`chg-<source event id>`) — and
decays it to a time with `jpu.policy.fairshare.decayed`. Because F3 charging is
`value = decayed(t) + amount`, a lab's stored value is the sum of its charges each decayed from
its own `as_of`: the listed contributions add up to `GET /v1/labs/{lab}` (F5).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from jpu.domain.arrays import tasks_of
from jpu.events import (
    Delivered,
    JobEnded,
    JobSubmitted,
    ReservationReleased,
    ReservationShrunk,
    UsageCharged,
)
from jpu.policy.charging import charge_id
from jpu.policy.fairshare import decayed
from jpu.policy.model import LabUsage

KINDS: Final = {
    "job_end": "run",  # the attempt's run, plus reservation time not charged yet (R4, F4)
    "demoted": "reservation",  # R3: charged at release
    "maintenance": "reservation",  # M1: charged like R3
    "capacity": "reservation",  # R5: charged like R3
    "initial": "initial",  # the configured starting usage (O1)
}


class Held(msgspec.Struct, frozen=True):
    """GPU-seconds held on one tier and what they cost there (F1)."""

    what: str  # "run" | "startup" | "reservation"
    tier: str | None
    gpu_seconds: float
    tflops: float


class ChargeLine(msgspec.Struct, kw_only=True):
    seq: int
    charge_id: str
    lab: str
    reason: str  # UsageCharged.reason
    kind: str  # KINDS: run | reservation | initial
    job_id: str | None
    attempt: int | None
    user: str | None
    at: float  # the charge's as_of: when it entered the lab's usage (F3)
    amount: float  # TFLOP-s, as charged
    held: list[Held]  # what it paid for, from its source event
    value_after: float  # the lab's stored usage right after it
    decay: float = 1.0  # the factor applied since `at` (F3), at the explanation's time
    value_now: float = 0.0  # amount × decay: what it contributes to the lab's usage then


class Ledger:
    """Folds a log into every lab's charges with what each paid for."""

    def __init__(self) -> None:
        self.users: dict[str, tuple[str, str]] = {}  # job -> (lab, user)
        self.lazy: dict[str, list[Held]] = {}  # job -> reservation time awaiting its end (R4)
        self.sources: dict[str, list[Held]] = {}  # charge id -> what it paid for
        self.lines: list[ChargeLine] = []
        self.last: dict[str, LabUsage] = {}  # lab -> stored usage after its last charge
        self.seq = 0

    def apply(self, d: Delivered) -> None:
        if d.seq <= self.seq:
            return
        self.seq = d.seq
        e = d.event
        if isinstance(e, JobSubmitted):
            for job in tasks_of(e):  # each task of an array is charged as a job (Q7)
                self.users[job.job_id] = (e.lab, e.user)
        elif isinstance(e, ReservationShrunk):
            held = Held("reservation", e.tier, e.gpu_seconds, e.tflops)
            self.lazy.setdefault(e.job_id, []).append(held)
        elif isinstance(e, ReservationReleased):
            held = Held("reservation", e.tier, e.gpu_seconds, e.tflops)
            if e.charged_now:  # R3, M1, R5: its own charge
                self.sources[charge_id(e.event_id)] = [held]
            else:  # R4 swap, dispatch, cancel: rides with the attempt's end (F4)
                self.lazy.setdefault(e.job_id, []).append(held)
        elif isinstance(e, JobEnded):
            parts = [
                Held("startup", e.tier, e.gpu_seconds_startup, e.tflops),
                Held("run", e.tier, e.gpu_seconds_run, e.tflops),
            ]
            parts = [p for p in parts if p.gpu_seconds > 0]
            lazy = self.lazy.pop(e.job_id, [])
            if not lazy and e.gpu_seconds_reserved > 0:  # before this log's start: one line
                lazy = [Held("reservation", e.tier, e.gpu_seconds_reserved, e.tflops)]
            self.sources[charge_id(e.event_id)] = parts + lazy
        elif isinstance(e, UsageCharged):
            self._charged(d.seq, e)

    def _charged(self, seq: int, e: UsageCharged) -> None:
        owner = self.users.get(e.job_id or "")
        self.lines.append(
            ChargeLine(
                seq=seq,
                charge_id=e.event_id,
                lab=e.lab,
                reason=e.reason,
                kind=KINDS.get(e.reason, e.reason),
                job_id=e.job_id,
                attempt=e.attempt,
                user=owner[1] if owner is not None else None,
                at=e.as_of,
                amount=e.amount,
                held=self.sources.pop(e.event_id, []),
                value_after=e.value_after,
            )
        )
        self.last[e.lab] = LabUsage(e.value_after, e.as_of)


def ledger(events: Iterable[Delivered]) -> Ledger:
    out = Ledger()
    for d in events:
        out.apply(d)
    return out


class UsageExplanation(msgspec.Struct, kw_only=True):
    lab: str
    at: float  # every value is decayed to this time
    half_life_s: float
    since: float | None
    until: float | None
    charges: list[ChargeLine]  # the charges in [since, until), oldest first
    listed_amount: float  # Σ amount of the listed charges
    listed_value: float  # Σ value_now of the listed charges
    total_value: float  # Σ value_now of every charge of the lab (the whole log)
    usage: float  # the lab's usage at `at` (F3: its last stored value decayed), = total_value
    raw_value: float  # the stored (value, as_of) GET /v1/labs/{lab} shows
    as_of: float | None


def _in(t: float, since: float | None, until: float | None) -> bool:
    return (since is None or t >= since) and (until is None or t < until)


def explain_usage(
    book: Ledger,
    lab: str,
    at: float,
    half_life_s: float,
    *,
    since: float | None = None,
    until: float | None = None,
) -> UsageExplanation:
    """The lab's charges with the decay applied since each one, valued at `at` (F3)."""
    total = 0.0
    listed: list[ChargeLine] = []
    for line in book.lines:
        if line.lab != lab:
            continue
        now = decayed(LabUsage(line.amount, line.at), at, half_life_s)
        total += now
        if _in(line.at, since, until):  # a copy: the ledger may be shared and extended
            decay = now / line.amount if line.amount else 1.0
            listed.append(msgspec.structs.replace(line, decay=decay, value_now=now))
    stored = book.last.get(lab)
    return UsageExplanation(
        lab=lab,
        at=at,
        half_life_s=half_life_s,
        since=since,
        until=until,
        charges=listed,
        listed_amount=sum(c.amount for c in listed),
        listed_value=sum(c.value_now for c in listed),
        total_value=total,
        usage=decayed(stored, at, half_life_s) if stored is not None else 0.0,  # F6
        raw_value=stored.value if stored is not None else 0.0,
        as_of=stored.as_of if stored is not None else None,
    )


class LabStatement(msgspec.Struct, kw_only=True):
    lab: str
    tflop_s: float  # charged in the period (undecayed; the initial usage apart)
    initial_tflop_s: float
    gpu_hours: dict[str, float]  # tier -> GPU-hours held (run + startup + reservations)
    reserved_gpu_hours: float  # of which held by reservations
    jobs: int  # distinct jobs charged in the period
    attempts: int
    share: float  # of every lab's TFLOP-s in the period (0 when nothing was charged)


class UsageStatement(msgspec.Struct, kw_only=True):
    since: float | None
    until: float | None
    labs: list[LabStatement]
    tflop_s: float
    gpu_hours: dict[str, float]


def usage_statement(
    book: Ledger, *, since: float | None = None, until: float | None = None
) -> UsageStatement:
    """Like `sreport cluster AccountUtilizationByUser`: per lab what it was charged for in
    [since, until) (by the charges' as_of), GPU-hours by tier, jobs, its share of the cluster."""
    per: dict[str, LabStatement] = {}
    jobs: dict[str, set[str]] = {}
    attempts: dict[str, set[tuple[str, int | None]]] = {}
    for line in book.lines:
        if not _in(line.at, since, until):
            continue
        s = per.setdefault(
            line.lab,
            LabStatement(lab=line.lab, tflop_s=0.0, initial_tflop_s=0.0, gpu_hours={},
                         reserved_gpu_hours=0.0, jobs=0, attempts=0, share=0.0),
        )  # fmt: skip
        if line.kind == "initial":
            s.initial_tflop_s += line.amount
            continue
        s.tflop_s += line.amount
        for h in line.held:
            tier = h.tier or "unknown"
            s.gpu_hours[tier] = s.gpu_hours.get(tier, 0.0) + h.gpu_seconds / 3600.0
            if h.what == "reservation":
                s.reserved_gpu_hours += h.gpu_seconds / 3600.0
        if line.job_id is not None:
            jobs.setdefault(line.lab, set()).add(line.job_id)
            attempts.setdefault(line.lab, set()).add((line.job_id, line.attempt))
    total = sum(s.tflop_s for s in per.values())
    by_tier: dict[str, float] = {}
    for s in per.values():
        s.jobs, s.attempts = len(jobs.get(s.lab, ())), len(attempts.get(s.lab, ()))
        s.share = s.tflop_s / total if total > 0 else 0.0
        for tier, hours in s.gpu_hours.items():
            by_tier[tier] = by_tier.get(tier, 0.0) + hours
    return UsageStatement(
        since=since,
        until=until,
        labs=sorted(per.values(), key=lambda s: s.lab),
        tflop_s=total,
        gpu_hours=by_tier,
    )
