"""Estimated start of every queued job from the live fold (SPEC U4). Pure: `now` passed in.

    estimate(state, config, now, runtimes) -> ForwardResult

The dispatcher's `ClusterState` (the same fold its cycle decides on) is copied into a `Present`
with what the estimate assumes of each job (`assume`), and `jpu.sim.forward` plays it forward
with the same policy core (see there for what is assumed).

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

import msgspec

from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.domain.promotion import configured_limits
from jpu.domain.runs import RecentRuns
from jpu.domain.states import PLACED, QUEUED
from jpu.policy.charging import with_owed
from jpu.policy.model import MaintenanceState
from jpu.sim.forward import (
    Assumed,
    Basis,
    EstimateParams,
    ForwardResult,
    Present,
    forward,
    taken,
)

__all__ = ["EstimateParams", "ForwardResult", "RunTimes", "assume", "estimate", "present"]

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


def assume(
    state: ClusterState, config: Config, now: float, runtimes: RunTimes
) -> dict[str, Assumed]:
    """The estimate's assumptions, one per job it plays (see the module docstring and
    jpu.sim.forward): how long each queued, personal-queue and running job runs, and when each
    running job ends. The jobs not here (ended, or an OOM not yet decided) are not played."""
    out: dict[str, Assumed] = {}
    for j in state.jobs.values():
        if j.placement is not None and j.state in PLACED:
            begun = j.started_at or j.dispatched_at or now
            d, basis = runtimes.running(
                j.user, j.lab, j.num_gpus, j.time_limit_s, max(0.0, now - begun)
            )
            ends = None
            if j.state == "CANCELLING":  # X5: SIGTERM now, SIGKILL after the grace
                ends = now + config.cancel_grace_s
            elif d is not None:
                ends = begun + d
            out[j.job_id] = Assumed(duration_s=d, basis=basis, ends_at=ends)
        elif j.state in QUEUED or j.state == "PERSONAL_QUEUE_WAIT":
            d, basis = runtimes.duration(j.user, j.lab, j.num_gpus, j.time_limit_s)
            out[j.job_id] = Assumed(duration_s=d, basis=basis)
    return out


def served_start(start: float | None, now: float) -> float | None:
    """SPEC U4 at the answer's edge: an estimate computed at the dispatcher's last cycle is
    never served in the past (between two estimates "now" moves on; a start already due is
    "now", not seconds ago). None (unknown) stays None."""
    return None if start is None else max(start, now)


def present(
    state: ClusterState, config: Config, now: float, runtimes: RunTimes | None = None
) -> Present:
    """The live fold at `now` as the forward estimate's starting point: copies of what the fold
    holds and the estimate's assumptions (taken between two cycles; the forward may then run
    anywhere)."""
    assumed = assume(state, config, now, runtimes or RunTimes(state.runs))
    maintenance: MaintenanceState = state.maintenance.state  # type: ignore[assignment]
    return Present(
        now=now,
        jobs=taken(state, assumed),
        assumed=assumed,
        inventory=dict(state.inventory),
        down=frozenset(state.down),
        usage=with_owed(state.usage, state.owed.values(), config.half_life_s),
        maintenance=maintenance,
        tiers={t.name: t for t in config.tiers},
        half_life_s=config.half_life_s,
        limits=configured_limits(config),
        max_active_jobs=config.max_active_jobs,
        reservation_demotion=config.reservation_demotion,
        reservation_demotion_margin=config.reservation_demotion_margin,
        reservation_backfill=config.reservation_backfill,
        arrays=[msgspec.structs.replace(a) for a in state.arrays.values()],  # the forward's own
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
