"""Releasing a reservation (SPEC R3–R5): what it held and what is charged at once."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import msgspec

from jpu.config import Tier
from jpu.policy.fairshare import held_gpu_seconds
from jpu.policy.model import (
    CycleResult,
    QueuedJob,
    ReleaseReason,
    Reservation,
    ReservationRelease,
    ReservationShrink,
    ShrinkReason,
)
from jpu.policy.placements import Slot, tier_admits
from jpu.policy.pool import Pool

Held = dict[str, tuple[Slot | None, list[int], bool]]  # job -> (placement, GPUs held, any lost)
Kept = tuple[QueuedJob, Slot, list[int]]  # a kept holder, its placement, the GPUs it holds
# R6: (job not rank 1, rank 1, its placement, GPUs it holds) -> how many of them it gives back:
# 0 keeps them, all demotes it (R3), fewer yields those (`yield`) (jpu.policy.demotion)
GiveBack = Callable[[QueuedJob, QueuedJob, Slot, list[int]], int]

# R3 demotion, M1 maintenance and R5 capacity loss charge the held time at once; dispatch and
# swap leave it to the attempt's end (F4, R4); cancellation charges it with the job's end.
CHARGED_AT_RELEASE: frozenset[str] = frozenset({"demoted", "maintenance", "capacity"})


def release(
    job: QueuedJob, reason: ReleaseReason, now: float, tiers: Mapping[str, Tier]
) -> ReservationRelease:
    r = job.reservation
    assert r is not None
    held = held_gpu_seconds(r, now)
    tier = tiers.get(r.tier)
    held_cost = held * tier.tflops if tier is not None else 0.0  # F1
    return ReservationRelease(
        job_id=job.job_id,
        lab=job.lab,
        node=r.node,
        tier=r.tier,
        gpus=r.gpus,
        reason=reason,
        gpu_seconds=held,
        charge_now=held_cost if reason in CHARGED_AT_RELEASE else 0.0,
        held_cost=held_cost,
    )


def hold(pool: Pool, holders: Sequence[QueuedJob]) -> Held:
    """The queue's reservations are authoritative; GPUs they name are never idle for others.

    A GPU of a reservation that is now down or running something else is "lost".
    A `reserved:<id>` GPU whose job is not queued stays non-idle: it is freed by the release
    of that reservation (cancellation), never taken silently.
    """
    held: Held = {}
    for j in holders:
        r = j.reservation
        assert r is not None
        s = pool.slot(r.node, r.tier)
        if s is None:
            held[j.job_id] = (None, [], True)
            continue
        mine = s.reserved.setdefault(j.job_id, [])
        idle = set(s.idle)
        alive = [g for g in r.gpus if g in idle or g in mine]
        if idle.intersection(r.gpus):  # projection lag: state still says free/backfill
            s.idle = [g for g in s.idle if g not in r.gpus]
        mine[:] = sorted(set(mine) | set(alive))
        held[j.job_id] = (s, mine, len(alive) < len(r.gpus))
    return held


def release_phase(
    holders: Sequence[QueuedJob],
    held: Held,
    rank1: QueuedJob | None,
    tiers: Mapping[str, Tier],
    now: float,
    out: CycleResult,
    give_back: GiveBack | None = None,
    parked: list[Kept] | None = None,
) -> Kept | None:
    """Phase 3: capacity/tier losses (R5, T2), then R3 demotion of every holder but rank 1.
    With `give_back` (R6, not strict) a holder it spares is kept and appended to `parked`,
    without the GPUs it yields (`yield`)."""
    kept: Kept | None = None
    for j in holders:
        s, mine, lost = held[j.job_id]
        tier = tiers.get(j.reservation.tier) if j.reservation else None
        top = j is rank1
        reason: ReleaseReason
        back = 0
        if s is None or tier is None or s.capacity < j.num_gpus or (lost and not mine):
            reason = "capacity"  # R5: the placement can no longer fit the job
        elif not tier_admits(j, tier):
            reason = "capacity"  # T2: tier inactive (or the job no longer admits it)
        elif not top and (
            rank1 is None
            or give_back is None
            or parked is None
            # R7: one that lent all its GPUs holds none a higher job could use: kept (D5)
            or (mine and (back := give_back(j, rank1, s, mine)) >= len(mine))
        ):
            reason = "demoted"  # R3 (R6: in a damped mode only when it says so; `yield`: all)
        else:
            if lost:  # R5: the lost GPUs leave the reservation, the rest is kept
                j = _shrink(j, mine, tier.tflops, now, out)
            if back:  # R6 yield: the GPUs a higher job can start on leave, the rest is kept
                j, mine = _yield(j, s, mine, back, tier.tflops, now, out)
            if top:
                kept = (j, s, mine)
            elif parked is not None:
                parked.append((j, s, mine))  # R6: kept although not rank 1 ("parked")
            continue
        out.releases.append(release(j, reason, now, tiers))
        if s is not None:
            s.reserved.pop(j.job_id, None)
            s.idle.extend(mine)  # its GPUs are idle again this cycle
    return kept


def _yield(
    job: QueuedJob, s: Slot, mine: list[int], k: int, tflops: float, now: float, out: CycleResult
) -> tuple[QueuedJob, list[int]]:
    """R6 `yield`: give back `k` of the held GPUs, those that joined last (the least held time
    rides with the attempt), idle again this cycle for the higher jobs; the rest stays."""
    r = job.reservation
    assert r is not None
    joined = r.joined_at()
    back = set(sorted(mine, key=lambda g: (joined.get(g, r.since), g))[len(mine) - k :])
    keep = [g for g in mine if g not in back]
    job = _shrink(job, keep, tflops, now, out, "yielded")
    mine[:] = keep  # the slot's own list (s.reserved[job])
    s.idle.extend(sorted(back))
    return job, mine


def _shrink(
    job: QueuedJob,
    keep: list[int],
    tflops: float,
    now: float,
    out: CycleResult,
    reason: ShrinkReason = "lost",
) -> QueuedJob:
    """R5 (`lost`) / R6 (`yielded`): the reservation without the GPUs that leave it; their held
    time rides with the attempt (F4, like a swap's, R4)."""
    r = job.reservation
    assert r is not None
    joined = r.joined_at()
    removed = tuple(g for g in r.gpus if g not in keep)
    held = sum(max(0.0, now - joined[g]) for g in removed)
    gpus = tuple(g for g in r.gpus if g in keep)
    out.shrinks.append(
        ReservationShrink(
            job_id=job.job_id,
            node=r.node,
            tier=r.tier,
            gpus=gpus,
            removed=removed,
            gpu_seconds=held,
            tflops=tflops,
            reason=reason,
        )
    )
    smaller = Reservation(r.node, r.tier, gpus, r.since, tuple(joined[g] for g in gpus))
    return msgspec.structs.replace(job, reservation=smaller)
