"""Baseline policies with the same signature as `cycle` (STYLE: one signature for every policy),
so the simulator can compare them on the same workload.

- `fifo_cycle`: order by (queue_entered_at, job_id) only; dispatch whatever fits, in order,
  skipping jobs that do not fit now (greedy FIFO with skipping); no reservations, no fair-share.
- `slurm_like_cycle` (in slurm_like.py): multifactor priority + EASY backfill.
"""

from __future__ import annotations

from jpu.policy.classes import ClassTable
from jpu.policy.model import CycleResult, Snapshot
from jpu.policy.placements import scan
from jpu.policy.pool import Pool
from jpu.policy.release import hold, release, release_phase
from jpu.policy.slurm_like import slurm_like_cycle
from jpu.policy.view import CycleView
from jpu.policy.walk import Walk

__all__ = ["fifo_cycle", "slurm_like_cycle"]


def fifo_cycle(snapshot: Snapshot, now: float) -> CycleResult:
    tiers = snapshot.tiers
    view = CycleView(snapshot.queue, ClassTable(tiers))  # entry order only
    out = CycleResult(order=list(view.order))
    holders = view.holders  # none under this policy, unless switched from another
    if snapshot.maintenance != "NORMAL":  # D6 holds for every policy
        out.releases = [release(j, "maintenance", now, tiers) for j in holders]
        out.pending = dict.fromkeys(out.order, "Maintenance")
        return out
    pool = Pool(scan(snapshot.gpus, tiers), tiers)
    release_phase(holders, hold(pool, holders), None, tiers, now, out)  # FIFO keeps none
    pool.index()
    Walk(pool, view, now, out).run(None, reservations=False)
    return out
