"""Slurm-like baseline: multifactor priority (fair-share + age), then EASY backfill.

Priority = W_FAIRSHARE × 2^(−usage/mean usage) + W_AGE × min(1, age/MAX_AGE) (Slurm's classic
fair-share factor with equal shares, and its age factor). Jobs start in priority order while they
fit; the first job that does not fit gets a shadow reservation: the earliest time some fit
placement has enough GPUs, from running jobs' `started_at + time_limit_s`. A lower job may start
now only where it cannot delay that: another placement, or it ends (by its own time limit) before
the shadow time, or it uses only GPUs the top job will not need then.
"""

from __future__ import annotations

from collections.abc import Sequence

from jpu.policy.classes import ClassTable, RequestClass
from jpu.policy.model import CycleResult, PendingReason, QueuedJob, RunningJob, Snapshot
from jpu.policy.ordering import lab_usage_at
from jpu.policy.placements import Slot, scan
from jpu.policy.pool import Pool
from jpu.policy.release import hold, release, release_phase
from jpu.policy.walk import dispatch_of

W_FAIRSHARE = 10_000.0
W_AGE = 1_000.0
MAX_AGE_S = 7 * 24 * 3600.0  # Slurm PriorityMaxAge default (7-0)
DEFAULT_TIME_LIMIT_S = 24 * 3600.0  # like a partition's DefaultTime, for jobs without a limit


def priority_order(snapshot: Snapshot, now: float) -> list[QueuedJob]:
    labs = {j.lab for j in snapshot.queue} | set(snapshot.usage)
    at = lab_usage_at(labs, snapshot.usage, now, snapshot.half_life_s)
    mean = sum(at.values()) / len(at) if at else 0.0
    fs = {lab: 2.0 ** (-u / mean) if mean > 0 else 1.0 for lab, u in at.items()}

    def key(j: QueuedJob) -> tuple[float, float, str]:
        age = min(1.0, max(0.0, now - j.queue_entered_at) / MAX_AGE_S)
        return (-(W_FAIRSHARE * fs[j.lab] + W_AGE * age), j.queue_entered_at, j.job_id)

    return sorted(snapshot.queue, key=key)


def limit_of(time_limit_s: float | None) -> float:
    return time_limit_s if time_limit_s else DEFAULT_TIME_LIMIT_S


class Shadow:
    """The top blocked job's reservation: placement, start time, GPUs to spare there then."""

    __slots__ = ("extra", "slot", "time")

    def __init__(self, slot: Slot | None, time: float, extra: int) -> None:
        self.slot, self.time, self.extra = slot, time, extra


def shadow_for(k: RequestClass, pool: Pool, running: Sequence[RunningJob], now: float) -> Shadow:
    ends: dict[tuple[str, str], list[tuple[float, int]]] = {}
    for r in running:
        end = max(now, r.started_at + limit_of(r.time_limit_s))
        ends.setdefault((r.node, r.tier), []).append((end, len(r.gpus)))
    rank = {t: i for i, lvl in enumerate(k.levels) for t in lvl}
    best: tuple[float, int, str, str, int] | None = None
    for (node, tier), s in pool.slots.items():
        if tier not in rank or s.capacity < k.n:
            continue
        free = len(s.idle)
        for end, g in sorted(ends.get((node, tier), [])):
            free += g
            if free >= k.n:
                cand = (end, rank[tier], node, tier, free - k.n)
                best = cand if best is None or cand < best else best
                break
    if best is None:  # nothing will ever free up for it: nothing to protect
        return Shadow(None, float("inf"), 0)
    return Shadow(pool.slots[(best[2], best[3])], best[0], best[4])


def _pick(
    pool: Pool, k: RequestClass, job: QueuedJob, sh: Shadow | None, now: float
) -> Slot | None:
    if sh is None:
        return pool.best_fit(k.levels, k.n)
    ends_in_time = now + limit_of(job.time_limit_s) <= sh.time
    for s in pool.candidates(k.levels, k.n):
        if s is not sh.slot or ends_in_time or k.n <= sh.extra:
            return s
    return None


def slurm_like_cycle(snapshot: Snapshot, now: float) -> CycleResult:
    tiers = snapshot.tiers
    ordered = priority_order(snapshot, now)
    out = CycleResult(order=[j.job_id for j in ordered])
    holders = [j for j in ordered if j.reservation is not None]
    if snapshot.maintenance != "NORMAL":  # D6 holds for every policy
        out.releases = [release(j, "maintenance", now, tiers) for j in holders]
        out.pending = dict.fromkeys(out.order, "Maintenance")
        return out
    pool = Pool(scan(snapshot.gpus, tiers), tiers)
    release_phase(holders, hold(pool, holders), None, tiers, now, out)
    pool.index()
    classes = ClassTable(tiers)
    classes.baseline = dict(pool.max_idle)
    pending: dict[str, PendingReason] = {}
    sh: Shadow | None = None
    for j in ordered:
        k = classes[classes.id_of((j.num_gpus, j.tiers, j.min_vram_gb))]
        slot = _pick(pool, k, j, sh, now) if any(pool.max_idle.values()) else None
        if slot is None:
            if sh is None:
                sh = shadow_for(k, pool, snapshot.running, now)  # EASY: only the top job
            pending[j.job_id] = k.reason
            continue
        if sh is not None and slot is sh.slot and now + limit_of(j.time_limit_s) > sh.time:
            sh.extra -= k.n
        out.dispatches.append(dispatch_of(j, slot, pool.take(slot, k.n)))
    out.pending = pending
    return out
