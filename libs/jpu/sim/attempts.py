"""A job's life outside the cycle: submission, promotion, attempt end, OOM escalation, cancel.

These are the parts intake, slurm-agent and accounting play in the live system (SPEC Q, X, F).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from jpu.events import (
    JobCancelRequested,
    JobEnded,
    JobPromoted,
    JobRetryDeclined,
    JobRetryScheduled,
    JobSubmitted,
)
from jpu.policy import fairshare, oom
from jpu.policy.model import QueuedJob, Reservation
from jpu.policy.placements import ever_fits
from jpu.sim import backfill, cycles
from jpu.sim.state import (
    CANCEL,
    CANCELLED,
    COMPLETED,
    END,
    FAILED,
    GLOBAL,
    PERSONAL,
    REJECTED,
    RESERVING,
    RUNNING,
    SimJob,
)

if TYPE_CHECKING:
    from jpu.sim.engine import Simulator

_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]")


def queued(job: SimJob, entered: float, res: Reservation | None = None) -> QueuedJob:
    s = job.spec
    return QueuedJob(
        job_id=s.id,
        lab=s.lab,
        user=s.user,
        num_gpus=s.num_gpus,
        queue_entered_at=entered,
        tiers=frozenset(s.tiers) if s.tiers is not None else None,
        min_vram_gb=job.min_vram_gb,
        attempt=job.attempt,
        time_limit_s=s.time_limit_s,
        reservation=res,
    )


def submit(sim: Simulator, job: SimJob) -> bool:
    """Q2: a job no placement can ever run is rejected (no event); else JobSubmitted (Q4)."""
    s = job.spec
    job.min_vram_gb = s.min_vram_gb
    if not _ever_fits(sim, job):
        job.state = REJECTED
        job.end_reason = "NO_FIT_PLACEMENT"
        sim.finished(job)
        return False
    sim.log.emit(
        JobSubmitted,
        sim.now,
        job_id=s.id,
        lab=s.lab,
        user=s.user,
        name=_NAME_BAD.sub("_", s.id)[:128],
        command=f"# simulated: {s.duration_s} s",
        num_gpus=s.num_gpus,
        tiers=s.tiers,
        min_vram_gb=s.min_vram_gb,
        time_limit_s=None if s.time_limit_s is None else int(s.time_limit_s),
    )
    if s.cancel_s is not None:
        sim.at(sim.now + s.cancel_s, CANCEL, job)
    return True


def _ever_fits(sim: Simulator, job: SimJob) -> bool:
    """Q2 via the policy, once per request class: the simulated cluster never loses capacity."""
    s = job.spec
    key = (s.num_gpus, frozenset(s.tiers) if s.tiers is not None else None, s.min_vram_gb)
    fit = sim.fit_cache.get(key)
    if fit is None:
        fit = sim.fit_cache[key] = ever_fits(queued(job, sim.now), sim.cluster.gpus, sim.tiers)
    return fit


def enter_global_queue(sim: Simulator, job: SimJob) -> None:
    """Q5: promotion; queue_entered_at = promotion time."""
    job.state = GLOBAL
    job.queue_entered_at = sim.now
    sim.log.emit(JobPromoted, sim.now, job_id=job.spec.id, queue_entered_at=sim.now)
    sim.queue[job.spec.id] = queued(job, sim.now)
    sim.touch()  # D8: a job entered the global queue


def _outcome(sim: Simulator, job: SimJob) -> tuple[float, str, str | None]:
    """How the running attempt ends: (run seconds, state, reason).

    A GPU OOM (tier VRAM below peak_vram_gb) after oom_after_s, X7; a time limit shorter than the
    work kills it (Slurm TIMEOUT); otherwise it completes after duration_s.
    """
    s = job.spec
    assert job.tier is not None
    outcomes: list[tuple[float, str, str | None]] = [(s.duration_s, COMPLETED, None)]
    if s.peak_vram_gb is not None and sim.tiers[job.tier].vram_gb < s.peak_vram_gb:
        outcomes.append((min(s.oom_after_s, s.duration_s), FAILED, "OOM"))
    if s.time_limit_s is not None and s.time_limit_s < s.duration_s:
        outcomes.append((s.time_limit_s, FAILED, "TIMEOUT"))
    return min(outcomes, key=lambda o: o[0])  # earliest; ties: the first listed cause


def schedule_end(sim: Simulator, job: SimJob) -> None:
    sim.at(sim.now + _outcome(sim, job)[0], END, (job, job.attempt))


def on_end(sim: Simulator, item: tuple[SimJob, int]) -> None:
    job, attempt = item
    if job.state != RUNNING or job.attempt != attempt:
        return  # the attempt already ended (cancelled)
    _, state, reason = _outcome(sim, job)
    end_run(sim, job, state, reason=reason)


def end_run(sim: Simulator, job: SimJob, state: str, *, reason: str | None = None) -> None:
    """X6 + F4: JobEnded with the attempt's whole uncharged cost, then its UsageCharged."""
    assert job.tier is not None and job.node is not None and job.started_at is not None
    now, n = sim.now, len(job.gpus)
    tflops = sim.tiers[job.tier].tflops
    run_s = now - job.started_at
    usage = fairshare.cost(n, run_s, tflops) + job.uncharged_reserved_cost
    oom_verdict = reason == "OOM"
    ended = sim.log.emit(
        JobEnded,
        now,
        job_id=job.spec.id,
        attempt=job.attempt,
        state=state,
        exit_code=0 if state == COMPLETED else (None if state == CANCELLED else 1),
        node=job.node,
        tier=job.tier,
        gpus=list(job.gpus),
        gpu_seconds_run=n * run_s,
        gpu_seconds_reserved=job.uncharged_reserved_gpu_s,
        tflops=tflops,
        usage=usage,
        oom=oom_verdict,
        reason=reason,
        backend_job_id=f"sim-{job.spec.id}-{job.attempt}",
    )
    sim.totals.run_gpu_s += n * run_s
    del sim.running[job.spec.id]
    positions = sim.cluster.positions(job.node, job.tier, job.gpus)
    sim.cluster.free(positions, now)
    backfill.watch(sim, positions)
    job.uncharged_reserved_cost = job.uncharged_reserved_gpu_s = 0.0
    sim.charge(job, usage, "job_end", ended.event_id)
    sim.touch()  # D8: GPUs freed
    if oom_verdict:
        _escalate(sim, job)
    else:
        job.end_reason = reason
        _terminal(sim, job, state)


def _escalate(sim: Simulator, job: SimJob) -> None:
    """X8: back to the global queue with attempt + 1 and more VRAM, or FAILED (reason OOM)."""
    assert job.tier is not None
    verdict = oom.escalate(
        attempt=job.attempt,
        tier_vram_gb=sim.tiers[job.tier].vram_gb,
        gpus=sim.cluster.gpus,
        tiers=sim.tiers,
        num_gpus=job.spec.num_gpus,
        job_tiers=job.spec.tiers,
        max_attempts=sim.params.max_attempts,
    )
    if isinstance(verdict, oom.Fail):
        job.end_reason = "OOM"
        sim.log.emit(
            JobRetryDeclined,
            sim.now,
            job_id=job.spec.id,
            attempt=job.attempt,
            reason=verdict.why,
            needed_vram_gb=verdict.needed_vram_gb,
        )
        _terminal(sim, job, FAILED)
        return
    sim.totals.oom_retries += 1
    job.attempt = verdict.attempt
    job.min_vram_gb = verdict.min_vram_gb
    job.state = GLOBAL
    sim.log.emit(
        JobRetryScheduled,
        sim.now,
        job_id=job.spec.id,
        attempt=job.attempt,
        min_vram_gb=job.min_vram_gb,
    )
    assert job.queue_entered_at is not None
    sim.queue[job.spec.id] = queued(job, job.queue_entered_at)  # keeps queue_entered_at (X8)
    sim.touch()


def _terminal(sim: Simulator, job: SimJob, state: str) -> None:
    job.state = state
    job.end_at = sim.now
    sim.release_slot(job)


def on_cancel(sim: Simulator, job: SimJob) -> None:
    """A user cancel: charged for what the job held (F4); a slot frees (Q5)."""
    if job.terminal:
        return
    s = job.spec
    sim.log.emit(JobCancelRequested, sim.now, job_id=s.id, by=s.user)
    if job.state == RUNNING:
        end_run(sim, job, CANCELLED, reason="cancelled")
        return
    if job.state == PERSONAL:
        sim.personal[s.user].remove(job)
        _end_unstarted(sim, job)
        job.state, job.end_at = CANCELLED, sim.now
        sim.finished(job)
        return
    assert job.state in (GLOBAL, RESERVING)
    if job.held is not None:
        cycles.release(sim, job, "cancelled")
    del sim.queue[s.id]
    _end_unstarted(sim, job)
    _terminal(sim, job, CANCELLED)


def _end_unstarted(sim: Simulator, job: SimJob) -> None:
    """A cancel before any run: the attempt's cost is the reservation time it held (F4)."""
    usage, gpu_s = job.uncharged_reserved_cost, job.uncharged_reserved_gpu_s
    ended = sim.log.emit(
        JobEnded,
        sim.now,
        job_id=job.spec.id,
        attempt=job.attempt,
        state=CANCELLED,
        gpu_seconds_reserved=gpu_s,
        tflops=usage / gpu_s if gpu_s else 0.0,  # the reserved tier's rate
        usage=usage,
        reason="cancelled",
    )
    job.uncharged_reserved_cost = job.uncharged_reserved_gpu_s = 0.0
    sim.charge(job, usage, "job_end", ended.event_id)
