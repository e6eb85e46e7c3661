"""SPEC R7, backfill under a reservation (`reservation_backfill: limit`). Pure.

Rank 1's reservation waits for GPUs of its placement that running jobs hold. Its **shadow time**
is the earliest time it can hold all its GPUs there: the running jobs of the placement end, at
the latest, at `started_at + time_limit_s` (one with no limit never ends). A lower job whose own
time limit ends by then may start on GPUs the reservation holds: they leave it (`lent`, a
ReservationShrink), run that job, and come back idle before the shadow time, where the
reservation grows onto them again (D3.b). So it never starts later than it could have without
the loan, and no GPU-second is charged twice: the loaned GPUs' time so far rides with the
reserving attempt (F4, like R5's shrink), and from the loan on it is the borrower's run (F5).

Bounded on purpose (R7 says *only* when, never *must*): only rank 1's reservation lends (a parked
one, R6, does not: its GPUs, once back, would go to the walk's lower jobs before it grows onto
them), the GPUs it held when the cycle began and those it grew onto in this cycle (GPUs it was
waiting for: the loan lands after the grow in the log), and nothing while the shadow time is
unknown (some GPU it waits for runs a job without a limit) — the loan could then delay it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec

from jpu.policy.model import QueuedJob, Reservation, ReservationShrink, RunningJob
from jpu.policy.placements import Slot


def shadow_time(
    job: QueuedJob, own: Slot, held: int, running: Sequence[RunningJob], now: float
) -> float:
    """When `job`, holding `held` GPUs of `own`, can hold all it needs there: running jobs of the
    placement end by their limit (never without one). `now` if it already can; inf if never."""
    need = job.num_gpus - held - len(own.idle)
    if need <= 0:
        return now
    ends = sorted(
        (_end(r, now), len(r.gpus)) for r in running if r.node == own.node and r.tier == own.tier
    )
    for end, n in ends:
        need -= n
        if need <= 0:
            return end
    return math.inf


def _end(r: RunningJob, now: float) -> float:
    """The latest a running job ends: its limit (not before now), never without one."""
    return math.inf if r.time_limit_s is None else max(now, r.started_at + r.time_limit_s)


def may_borrow(job: QueuedJob, now: float, shadow: float) -> bool:
    """R7: a job with a time limit that ends by the shadow time (none without a limit)."""
    limit = job.time_limit_s
    return limit is not None and job.reservation is None and now + limit <= shadow


def lend_order(r: Reservation, held: Sequence[int], backfill: dict[int, str]) -> list[int]:
    """The held GPUs in the order they are lent: no LLM backfill to preempt first (B4), then
    the latest to join (ties by index)."""
    joined = r.joined_at()
    return sorted(held, key=lambda g: (g in backfill, -joined.get(g, r.since), g))


def with_grown(job: QueuedJob, grown: Sequence[int], now: float) -> QueuedJob:
    """The job with the GPUs it grew onto this cycle in its reservation (joined `now`): R7 may
    lend them too (GPUs the reservation was waiting for); the loan lands after the grow."""
    r = job.reservation
    if r is None or not grown:
        return job
    joined = r.joined_at()
    gpus = (*r.gpus, *grown)
    at = (*(joined[g] for g in r.gpus), *(now for _ in grown))
    return msgspec.structs.replace(job, reservation=Reservation(r.node, r.tier, gpus, r.since, at))


def lent_shrink(
    job: QueuedJob,
    removed: Sequence[int],
    to: str,
    until: float,
    tflops: float,
    now: float,
) -> tuple[ReservationShrink, QueuedJob]:
    """The reservation without the GPUs lent to `to`; their held time so far rides with the
    attempt (F4), from now on they are the borrower's (F5)."""
    r = job.reservation
    assert r is not None
    joined = r.joined_at()
    gone = set(removed)
    gpus = tuple(g for g in r.gpus if g not in gone)
    shrink = ReservationShrink(
        job_id=job.job_id,
        node=r.node,
        tier=r.tier,
        gpus=gpus,
        removed=tuple(g for g in r.gpus if g in gone),
        gpu_seconds=sum(max(0.0, now - joined[g]) for g in r.gpus if g in gone),
        tflops=tflops,
        reason="lent",
        lent_to=to,
        until=until,
    )
    smaller = Reservation(r.node, r.tier, gpus, r.since, tuple(joined[g] for g in gpus))
    return shrink, msgspec.structs.replace(job, reservation=smaller)
