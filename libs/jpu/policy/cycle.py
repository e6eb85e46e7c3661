"""The dispatch cycle, policy "jpu" (SPEC D3): a pure function of a snapshot and `now`.

    1. placements, GPUs of active reservations removed from idle      (P1, P2, R2)
    2. the queue in rank order                                         (D1)
    3. release reservations: maintenance (M1), capacity/tier (R5, T2), demotion (R3, R6)
    4. walk from rank 1: dispatch / grow / reserve / wait, pending reasons   (D3.4, D4, D5, D7)

Phase 2 runs first in code because phase 1 needs to know which queued jobs hold reservations.
"""

from __future__ import annotations

from jpu.policy.classes import ClassTable
from jpu.policy.demotion import Demotion, DemotionCheck
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import CycleResult, Snapshot
from jpu.policy.pending import Pending
from jpu.policy.placements import scan
from jpu.policy.pool import Pool
from jpu.policy.release import Kept, hold, release, release_phase
from jpu.policy.view import AnyView, CycleView, LabView
from jpu.policy.walk import Walk


def cycle(snapshot: Snapshot, now: float) -> CycleResult:
    tiers = snapshot.tiers
    # 2. D1 — rank order
    view = queue_view(snapshot, now)
    out = CycleResult(order=view.order)
    holders = view.holders
    if snapshot.maintenance != "NORMAL":
        # D6, M1: no dispatch, no new reservation; every reservation released, charged like R3
        out.releases = [release(j, "maintenance", now, tiers) for j in holders]
        out.pending = Pending(view.order, view.cid_rank, dict.fromkeys(view.present, "Maintenance"))
        return out
    # 1. placements; reserved GPUs are not idle for anyone else (P2, R2)
    pool = Pool(scan(snapshot.gpus, tiers), tiers)
    held = hold(pool, holders)
    # 3. R5/T2 capacity loss, then R3 demotion: in strict mode only rank 1 keeps a reservation;
    # a damped mode (R6) may keep ("park") others
    parked: list[Kept] = []
    check = demotion_check(snapshot, view, pool, now) if holders else None
    rank1 = view.job(0) if len(view) else None
    give_back = check.give_back if check is not None else None
    kept = release_phase(holders, held, rank1, tiers, now, out, give_back, parked)
    pool.index()
    # 4. walk from rank 1 (D3.4), pending reasons (D7)
    walk = Walk(pool, view, now, out)
    if snapshot.reservation_backfill == "limit":  # R7: shadow times from the running jobs
        walk.running = snapshot.running
    walk.run(kept, parked=parked, check=check)
    return out


def demotion_check(
    snapshot: Snapshot, view: AnyView, pool: Pool, now: float
) -> DemotionCheck | None:
    """SPEC R6: the mode's decision for this cycle, or None for strict R3 (demote every one)."""
    rule = Demotion(snapshot.reservation_demotion, snapshot.reservation_demotion_margin)
    if rule.mode == "strict":
        return None
    pool.index()  # the idle GPUs at the start of the cycle (before anything is released)
    return DemotionCheck(
        rule,
        order=view.order,
        cid_rank=view.cid_rank,
        present=view.present,
        holders={j.job_id for j in view.holders},
        classes=view.classes,
        pool=pool,
        usage=snapshot.usage,
        tiers=snapshot.tiers,
        now=now,
        half_life_s=snapshot.half_life_s,
    )


def queue_view(snapshot: Snapshot, now: float) -> AnyView:
    """D1 rank order: merged by lab when the caller keeps the queue grouped (`LabQueues`),
    sorted from the flat list otherwise."""
    q, tiers = snapshot.queue, snapshot.tiers
    if isinstance(q, LabQueues):
        return LabView(
            q, ClassTable(tiers, q.class_keys), snapshot.usage, now, snapshot.half_life_s
        )
    return CycleView(q, ClassTable(tiers), snapshot.usage, now, snapshot.half_life_s)
