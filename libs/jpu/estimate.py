"""Estimated start of every queued job from the live fold (SPEC U4). Pure: `now` passed in.

    estimate(state, config, now, runtimes) -> ForwardResult

The dispatcher's `ClusterState` (the same fold its cycle decides on) becomes a `Present`, which
`jpu.sim.forward` plays forward with the same policy core (see there for what is assumed).

How long a job runs once started (its basis):
- `limits`: its `time_limit_s`;
- `predicted`: without a limit, the median of the same user's last `KEEP` (20) completed runs with
  the same `num_gpus`, else the median of the lab's (same `num_gpus`), from `RunTimes`. With a
  limit, when the user's (else the lab's) recent runs ended well before their limits (median of
  run time / limit below `LOOSE`), the limit × that median: users who write 2× their run time
  get estimates from what their jobs really take (`RunTimes(scale_limits=False)`: limits only);
- `unknown`: neither (a running job then holds its GPUs for the whole estimate).

A running job already past its duration (an overrun) is never assumed to end "now": that put
every estimate on a full cluster at the moment it was computed, moving forward with each
recomputation. Given how long it has run, it ends after the median of the recorded runs (or limit
ratios) that lasted longer than that; with none, at its limit; with no limit either, `unknown`
(it holds its GPUs for the whole estimate, and the wait behind it says so). Only a job past its
own time limit ends "now" (the backend is killing it).
The recent runs are part of the shared fold (`ClusterState.runs`, jpu.domain.runs), in every
snapshot: a dispatcher restarted from one predicts as well as one that replayed the whole log.
"""

from __future__ import annotations

import statistics

from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.domain.holdings import gpus
from jpu.domain.promotion import configured_limits
from jpu.domain.runs import RecentRuns
from jpu.domain.states import PLACED, QUEUED, JobView, queued_job
from jpu.policy.charging import with_owed
from jpu.policy.model import Gpu, MaintenanceState
from jpu.sim.forward import (
    Basis,
    EstimateParams,
    ForwardJob,
    ForwardResult,
    Present,
    QueuedNow,
    RunningNow,
    forward,
)

__all__ = ["EstimateParams", "ForwardResult", "RunTimes", "estimate", "present"]

LOOSE = 0.9  # runs ending before 90 % of their limit (median): the limit is scaled


class RunTimes:
    """Durations from the fold's recent runs (`ClusterState.runs`, jpu.domain.runs)."""

    def __init__(self, runs: RecentRuns, *, scale_limits: bool = True) -> None:
        self.runs, self.scale_limits = runs, scale_limits

    def limit_ratio(self, user: str, lab: str) -> float | None:
        """Median run time / limit of the user's recent runs with a limit, else the lab's."""
        r = self.runs.ratios(user, lab)
        return float(statistics.median(r)) if r else None

    def predict(self, user: str, lab: str, num_gpus: int) -> float | None:
        d = self.runs.runs(user, lab, num_gpus)
        return float(statistics.median(d)) if d else None

    def duration(
        self, user: str, lab: str, num_gpus: int, time_limit_s: float | None
    ) -> tuple[float | None, Basis]:
        if time_limit_s:
            r = self.limit_ratio(user, lab) if self.scale_limits else None
            if r is not None and r < LOOSE:
                return float(time_limit_s) * r, "predicted"
            return float(time_limit_s), "limits"
        p = self.predict(user, lab, num_gpus)
        return (p, "predicted") if p is not None else (None, "unknown")

    def running(
        self, user: str, lab: str, num_gpus: int, time_limit_s: float | None, elapsed_s: float
    ) -> tuple[float | None, Basis]:
        """How long a job that has run `elapsed_s` runs in all: `duration`, unless it already
        ran past that (see the module docstring: never "it ends now")."""
        d, basis = self.duration(user, lab, num_gpus, time_limit_s)
        if d is None or d > elapsed_s:
            return d, basis
        if time_limit_s:
            if elapsed_s >= time_limit_s:  # past its limit: the backend is ending it
                return float(time_limit_s), "limits"
            seen = elapsed_s / time_limit_s
            ratios = self.runs.ratios(user, lab) if self.scale_limits else []
            longer = [r for r in ratios if r > seen]
            r = float(statistics.median(longer)) if longer else 1.0
            return (float(time_limit_s) * r, "predicted") if r < LOOSE else (time_limit_s, "limits")
        longer = [r for r in self.runs.runs(user, lab, num_gpus) if r > elapsed_s]
        return (float(statistics.median(longer)), "predicted") if longer else (None, "unknown")


def _fjob(j: JobView, runtimes: RunTimes, elapsed_s: float | None = None) -> ForwardJob:
    """`elapsed_s`: how long a running job has run (None: queued, not started)."""
    if elapsed_s is None:
        d, basis = runtimes.duration(j.user, j.lab, j.num_gpus, j.time_limit_s)
    else:
        d, basis = runtimes.running(j.user, j.lab, j.num_gpus, j.time_limit_s, elapsed_s)
    return ForwardJob(
        job_id=j.job_id,
        lab=j.lab,
        user=j.user,
        num_gpus=j.num_gpus,
        tiers=j.tiers,
        min_vram_gb=j.min_vram_gb,
        time_limit_s=j.time_limit_s,
        attempt=j.attempt,
        duration_s=d,
        basis=basis,
    )


def present(
    state: ClusterState, config: Config, now: float, runtimes: RunTimes | None = None
) -> Present:
    """The live fold at `now` as the forward estimate's starting point."""
    rt = runtimes or RunTimes(state.runs)
    running: list[RunningNow] = []
    queued: list[QueuedNow] = []
    keep: set[str] = set()  # jobs the estimate plays; GPUs held by others are freed
    for j in state.jobs.values():
        if j.placement is not None and j.state in PLACED:
            node, tier, held = j.placement
            begun = j.started_at or j.dispatched_at or now
            fj = _fjob(j, rt, max(0.0, now - begun))
            ends = None
            if j.state == "CANCELLING":  # X5: SIGTERM now, SIGKILL after the grace
                ends = now + config.cancel_grace_s
            elif fj.duration_s is not None:
                ends = begun + fj.duration_s
            running.append(
                RunningNow(
                    job=fj,
                    node=node,
                    tier=tier,
                    gpus=held,
                    started_at=j.dispatched_at or begun,  # F5: held from the dispatch
                    ends_at=ends,
                    uncharged_gpu_s=j.uncharged_reserved_gpu_s,
                    uncharged_cost=j.uncharged_reserved_usage,
                )
            )
            keep.add(j.job_id)
        elif j.state in QUEUED:
            queued.append(
                QueuedNow(
                    job=_fjob(j, rt),
                    record=queued_job(j),
                    uncharged_gpu_s=j.uncharged_reserved_gpu_s,
                    uncharged_cost=j.uncharged_reserved_usage,
                )
            )
            keep.add(j.job_id)
    personal: dict[str, list[ForwardJob]] = {}
    for user, ids in state.personal.items():
        pq = [
            _fjob(state.jobs[i], rt)
            for i in ids
            if i in state.jobs and state.jobs[i].state == "PERSONAL_QUEUE_WAIT"
        ]
        if pq:
            personal[user] = pq
    rows = []
    for g in gpus(state):
        holder = g.state.split(":", 1)[1] if g.state.startswith(("job:", "reserved:")) else None
        rows.append(Gpu(g.node, g.tier, g.index, "free") if holder and holder not in keep else g)
    maintenance: MaintenanceState = state.maintenance.state  # type: ignore[assignment]
    limits = configured_limits(config)
    return Present(
        now=now,
        tiers={t.name: t for t in config.tiers},
        gpus=rows,
        usage=with_owed(state.usage, state.owed.values(), config.half_life_s),
        half_life_s=config.half_life_s,
        maintenance=maintenance,
        running=running,
        queued=queued,
        personal=personal,
        limits=limits,
        max_active_jobs=config.max_active_jobs,
        reservation_demotion=config.reservation_demotion,
        reservation_demotion_margin=config.reservation_demotion_margin,
    )


def estimate(
    state: ClusterState,
    config: Config,
    now: float,
    runtimes: RunTimes | None = None,
    params: EstimateParams | None = None,
) -> ForwardResult:
    """SPEC U4: job id -> (estimated start | None, basis) for every queued job."""
    return forward(present(state, config, now, runtimes), params)
