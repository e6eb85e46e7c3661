"""The simulated backend and users: submissions, attempts that start, run, OOM or time out, and
cancels. What each of them appends is decided by the service that appends it live:

* a submission: intake's Q2 check (jpu.policy.placements.ever_fits), then `JobSubmitted`;
* an attempt's end: the slurm-agent's `JobEnded` from the backend's status
  (jpu.domain.ending.job_ended); after a GPU OOM the dispatcher's X8 decision
  is its next cycle's duty (`Simulator.duties`);
* a cancel: `JobCancelRequested`, then the agent's end of a dispatched attempt, or the
  dispatcher's end of a queued one, again a duty of its next cycle;
* a release (Q9): the owner's `JobReleased`, then intake's promotion.

An array (Q7) is one `JobSubmitted`; its tasks are the jobs the fold derives from it
(jpu.domain.arrays.tasks_of), each with its own attempts, end and charge, promoted under `%N` by
jpu.domain.promotion like any job.

Only the outcome of an attempt is the simulator's own (SPEC §10 workload: duration, peak VRAM,
time limit).
"""

from __future__ import annotations

import re

import msgspec

from jpu.domain import arrays
from jpu.domain.ending import job_ended
from jpu.domain.execution import AgentJob
from jpu.domain.holdings import gpus
from jpu.domain.observed import BackendState, BackendStatus
from jpu.domain.states import PLACED, JobView
from jpu.events import (
    JobCancelRequested,
    JobDispatched,
    JobReleased,
    JobStarted,
    JobSubmitted,
)
from jpu.policy.placements import ever_fits
from jpu.sim.state import CANCEL, END, RELEASE
from jpu.sim.workload import WorkloadJob
from jpu.sim.world import World

_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]")
OOM_OUTPUT = "torch.OutOfMemoryError: CUDA out of memory (simulated)"  # what X7 recognises


def request(s: WorkloadJob, now: float) -> JobSubmitted:
    """The submit intake appends for a workload line (Q4): one event, also for an array (Q7)."""
    return JobSubmitted(
        event_id="",
        ts=now,
        job_id=s.id,
        lab=s.lab,
        user=s.user,
        name=_NAME_BAD.sub("_", s.id)[:128],
        command=f"# simulated: {s.duration_s} s",
        num_gpus=s.num_gpus,
        tiers=s.tiers,
        min_vram_gb=s.min_vram_gb,
        time_limit_s=None if s.time_limit_s is None else int(s.time_limit_s),
        dependency=s.dependency,  # Q8: the fold resolves it as the services' does
        hold=s.hold,  # Q9
        array=None if s.array is None else arrays.parse(s.array, arrays.MAX_INDEX + 1),
    )


def jobs_of(s: WorkloadJob) -> list[WorkloadJob]:
    """The jobs a workload line creates: itself, or each task of its array (Q7) under the id
    the fold gives it (jpu.domain.arrays.tasks_of); a task runs, ends and is charged as its
    line says."""
    if s.array is None:
        return [s]
    return [
        msgspec.structs.replace(s, id=t.job_id, array=None)
        for t in arrays.tasks_of(request(s, s.submit_s))
    ]


def submit(sim: World, s: WorkloadJob) -> bool:
    """Q2: a job no placement can ever run is rejected (no event); else JobSubmitted (Q4), one
    event for a whole array (Q7). A cancel or a release applies to every task."""
    if not _ever_fits(sim, s):
        for job in jobs_of(s):
            sim.reject(job)
        return False
    event = sim.append(request(s, sim.now))
    for task in arrays.tasks_of(event):
        sim.submitted[task.job_id] = task
        if s.cancel_s is not None:
            sim.at(sim.now + s.cancel_s, CANCEL, task.job_id)
        if s.release_s is not None:
            sim.at(sim.now + s.release_s, RELEASE, task.job_id)
    return True


def _ever_fits(sim: World, s: WorkloadJob) -> bool:
    """Q2 via the policy, once per request class: the simulated cluster never loses capacity."""
    key = (s.num_gpus, frozenset(s.tiers) if s.tiers is not None else None, s.min_vram_gb)
    fit = sim.fit_cache.get(key)
    if fit is None:  # the workload line is the request (num_gpus, tiers, min_vram_gb)
        fit = sim.fit_cache[key] = ever_fits(s, gpus(sim.state), sim.tiers)
    return fit


def _outcome(sim: World, s: WorkloadJob, tier: str) -> tuple[float, BackendState, str]:
    """How an attempt on `tier` ends: (run seconds, backend state, output tail).

    A GPU OOM (tier VRAM below peak_vram_gb) after oom_after_s, X7; a time limit shorter than the
    work kills it (Slurm TIMEOUT); otherwise it completes after duration_s.
    """
    oom = s.peak_vram_gb is not None and sim.tiers[tier].vram_gb < s.peak_vram_gb
    if not oom and (s.time_limit_s is None or s.time_limit_s >= s.duration_s):
        return s.duration_s, "COMPLETED", ""  # the common case, without the list (per attempt)
    outcomes: list[tuple[float, BackendState, str]] = [(s.duration_s, "COMPLETED", "")]
    if oom:
        outcomes.append((min(s.oom_after_s, s.duration_s), "FAILED", OOM_OUTPUT))
    if s.time_limit_s is not None and s.time_limit_s < s.duration_s:
        outcomes.append((s.time_limit_s, "TIMEOUT", ""))
    return min(outcomes, key=lambda o: o[0])  # earliest; ties: the first listed cause


def start(sim: World, d: JobDispatched) -> None:
    """The backend runs a dispatched attempt at once (no start-up time, F5), from the
    dispatch's time (the cycle's; a forward estimate may place it earlier, `dispatched`)."""
    sim.running[d.job_id] = d
    sim.append(
        JobStarted(
            event_id="",
            ts=d.ts,
            job_id=d.job_id,
            attempt=d.attempt,
            backend_job_id=f"sim-{d.job_id}-{d.attempt}",
        )
    )
    run_s = _outcome(sim, sim.specs[d.job_id], d.tier)[0]
    sim.at(max(sim.now, d.ts + run_s), END, (d.job_id, d.attempt))


def on_end(sim: World, item: tuple[str, int]) -> None:
    job_id, attempt = item
    job = sim.state.jobs.get(job_id)
    if job is None or job.state not in PLACED or job.attempt != attempt:
        return  # the attempt already ended (cancelled)
    d = sim.running[job_id]
    _, state, output = _outcome(sim, sim.specs[job_id], d.tier)
    status = BackendStatus(
        state=state,
        exit_code=0 if state == "COMPLETED" else 1,
        started_at=job.started_at,
        ended_at=sim.now,
        output_tail=output,
    )
    end(sim, job, status)


def end(sim: World, job: JobView, status: BackendStatus) -> None:
    """The agent's JobEnded for the attempt (X6, F4, F5); an OOM is the dispatcher's to decide
    at its next cycle (X8, `Simulator.duties`)."""
    d = sim.running.pop(job.job_id)
    agent = AgentJob(view=job, submitted=sim.submitted[job.job_id], dispatched=d)
    backend_id = f"sim-{job.job_id}-{d.attempt}"
    ended = job_ended(agent, status, sim.tiers[d.tier], backend_id, sim.now)
    sim.append(ended)
    sim.duties_due |= ended.oom
    sim.promote(job.user)


def on_cancel(sim: World, job_id: str) -> None:
    """A user cancel: the agent ends a dispatched attempt at once, the dispatcher a queued one
    at its next cycle (F4, R5, `Simulator.duties`)."""
    job = sim.state.jobs.get(job_id)
    if job is None or job.terminal:
        return
    sim.append(JobCancelRequested(event_id="", ts=sim.now, job_id=job_id, by=job.user))
    if job.placement is not None:
        status = BackendStatus(
            state="CANCELLED", started_at=job.started_at, ended_at=sim.now, cancelled_by_us=True
        )
        end(sim, job, status)
    else:
        sim.duties_due = True


def on_release(sim: World, job_id: str) -> None:
    """Q9: the owner releases a held job still in the personal queue; intake promotes it (Q5)
    when a slot is free."""
    job = sim.state.jobs.get(job_id)
    if job is None or job.terminal or not job.held:
        return
    sim.append(JobReleased(event_id="", ts=sim.now, job_id=job_id, by=job.user))
    sim.promote(job.user)
