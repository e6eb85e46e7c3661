"""Applying a CycleResult to the simulated cluster, as the dispatcher + slurm-agent would.

Order (the result's own order): releases (R3, swap, ...), new reservations, grown reservations,
dispatches. Every change is one event in the log, stamped with the cycle's virtual time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from jpu.events import (
    BackfillEnded,
    JobDispatched,
    JobStarted,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
)
from jpu.policy import fairshare
from jpu.policy.model import (
    CycleResult,
    Dispatch,
    Reservation,
    ReservationRelease,
    RunningJob,
)
from jpu.policy.release import CHARGED_AT_RELEASE  # R3, M1, R5: charged at once
from jpu.sim import attempts, backfill
from jpu.sim.state import GLOBAL, RESERVING, RUNNING, Held, SimJob

if TYPE_CHECKING:
    from jpu.sim.engine import Simulator


def apply(sim: Simulator, result: CycleResult) -> None:
    for rel in result.releases:
        job = sim.jobs[rel.job_id]
        if job.held is not None:
            release(sim, job, rel.reason, rel)
    for sh in result.shrinks:
        _shrink(sim, sim.jobs[sh.job_id], sh.removed, sh.gpu_seconds, sh.tflops)
    for st in result.starts:
        _reserve(sim, sim.jobs[st.job_id], st.node, st.tier, st.gpus, new=True)
    for gr in result.grows:
        _reserve(sim, sim.jobs[gr.job_id], gr.node, gr.tier, gr.added, new=False)
    for d in result.dispatches:
        dispatch(sim, d)


def _requeue(sim: Simulator, job: SimJob) -> None:
    """Refresh the job's global-queue entry after its reservation changed."""
    h = job.held
    res = None
    if h is not None:
        idx = tuple(sorted(h.acquired))
        res = Reservation(h.node, h.tier, idx, h.since, joined=tuple(h.acquired[i] for i in idx))
    old = sim.queue[job.spec.id]
    sim.queue[job.spec.id] = attempts.queued(job, old.queue_entered_at, res)


def _shrink(
    sim: Simulator, job: SimJob, removed: tuple[int, ...], gpu_s: float, tflops: float
) -> None:
    """R5: lost GPUs leave the reservation; their held time rides with the attempt (F4)."""
    held = job.held
    assert held is not None
    for i in removed:
        held.acquired.pop(i, None)
    job.uncharged_reserved_gpu_s += gpu_s
    job.uncharged_reserved_cost += gpu_s * tflops
    sim.log.emit(
        ReservationShrunk,
        sim.now,
        job_id=job.spec.id,
        node=held.node,
        tier=held.tier,
        gpus=sorted(held.acquired),
        removed=list(removed),
        gpu_seconds=gpu_s,
        tflops=tflops,
    )
    _requeue(sim, job)


def _reserve(
    sim: Simulator, job: SimJob, node: str, tier: str, gpus: tuple[int, ...], *, new: bool
) -> None:
    now = sim.now
    if new:
        job.held = Held(node, tier, now)
        job.state = RESERVING
        sim.reserving += 1
    held = job.held
    assert held is not None and (held.node, held.tier) == (node, tier), "grow of another placement"
    sim.cluster.take(sim.cluster.positions(node, tier, gpus), f"reserved:{job.spec.id}")
    for i in gpus:
        held.acquired[i] = now
    all_gpus = sorted(held.acquired)
    if new:
        sim.log.emit(
            ReservationStarted, now, job_id=job.spec.id, node=node, tier=tier, gpus=all_gpus
        )
    else:
        sim.log.emit(
            ReservationGrown,
            now,
            job_id=job.spec.id,
            node=node,
            tier=tier,
            gpus=all_gpus,
            added=list(gpus),
        )
    _requeue(sim, job)


def release(
    sim: Simulator, job: SimJob, reason: str, decided: ReservationRelease | None = None
) -> None:
    """End the job's reservation. R3-like reasons charge at once; others ride with the attempt.

    Held time and cost come from the policy: its decision when the cycle released it, else the
    policy's own fairshare arithmetic on the reservation the queue shows (F2: per-GPU join time).
    """
    held = job.held
    assert held is not None
    now = sim.now
    tflops = sim.tiers[held.tier].tflops
    if decided is not None:
        gpu_s = decided.gpu_seconds
        cost = decided.held_cost or fairshare.cost(1, gpu_s, tflops)
    else:
        reservation = sim.queue[job.spec.id].reservation
        assert reservation is not None
        gpu_s = fairshare.held_gpu_seconds(reservation, now)
        cost = fairshare.cost(1, gpu_s, tflops)
    charged_now = reason in CHARGED_AT_RELEASE
    released = sim.log.emit(
        ReservationReleased,
        now,
        job_id=job.spec.id,
        node=held.node,
        tier=held.tier,
        gpus=sorted(held.acquired),
        reason=reason,
        gpu_seconds=gpu_s,
        charged_now=charged_now,
        tflops=tflops,
    )
    sim.totals.reserved_gpu_s += gpu_s
    positions = sim.cluster.positions(held.node, held.tier, list(held.acquired))
    sim.cluster.free(positions, now)
    backfill.watch(sim, positions)
    job.held = None
    job.state = GLOBAL
    sim.reserving -= 1
    if charged_now:
        sim.totals.demotions += reason == "demoted"
        amount = decided.charge_now if decided is not None else cost
        sim.charge(job, amount, reason, released.event_id)
    else:  # R4 swap / dispatch / cancel: charged lazily with the attempt (F4)
        job.uncharged_reserved_gpu_s += gpu_s
        job.uncharged_reserved_cost += cost
    if job.spec.id in sim.queue:
        _requeue(sim, job)
    if reason != "dispatched":  # D8: GPUs came back (when dispatched, they stay with the job)
        sim.touch()


def dispatch(sim: Simulator, d: Dispatch) -> None:
    job = sim.jobs[d.job_id]
    now = sim.now
    if job.held is not None:  # its reservation ends: into this job (dispatched) or elsewhere (R4)
        same = (job.held.node, job.held.tier) == (d.node, d.tier)
        release(sim, job, "dispatched" if same else "swap")
    cl = sim.cluster
    positions = cl.positions(d.node, d.tier, d.gpus)
    for p in positions:  # B2: research always wins, the backfill job is preempted first
        if p in cl.backfill:
            backfill_id, since = cl.end_backfill(p)
            sim.totals.backfill_gpu_s += now - since
            sim.totals.backfills_preempted += 1
            g = cl.gpus[p]
            sim.log.emit(
                BackfillEnded,
                now,
                backfill_id=backfill_id,
                node=g.node,
                tier=g.tier,
                gpu=g.index,
                reason="preempted",
            )
    cl.take(positions, f"job:{job.spec.id}")
    del sim.queue[job.spec.id]
    job.state = RUNNING
    job.node, job.tier, job.gpus, job.started_at = d.node, d.tier, tuple(d.gpus), now
    if job.first_dispatch_at is None:
        job.first_dispatch_at = now
    gpus = list(d.gpus)
    sim.log.emit(
        JobDispatched,
        now,
        job_id=job.spec.id,
        attempt=job.attempt,
        node=d.node,
        tier=d.tier,
        gpus=gpus,
    )
    sim.log.emit(
        JobStarted,
        now,
        job_id=job.spec.id,
        attempt=job.attempt,
        backend_job_id=f"sim-{job.spec.id}-{job.attempt}",
    )
    sim.running[job.spec.id] = RunningJob(
        job_id=job.spec.id,
        lab=job.spec.lab,
        node=d.node,
        tier=d.tier,
        gpus=tuple(d.gpus),
        started_at=now,
        time_limit_s=job.spec.time_limit_s,
    )
    attempts.schedule_end(sim, job)
