"""Forward estimate of when queued jobs start (SPEC U4): the simulator, seeded with the cluster as
it stands now, runs the services' own policy core forward on a virtual clock. Pure: `now` is the
`Present`'s, no I/O.

The `Present` holds copies of what the dispatcher's fold holds (`taken`) and what the estimate
assumes of every job in it (`jpu.explain.estimate.assume`); the forward's fold is rebuilt from
them as a snapshot's load rebuilds one (`own_fold`); from there on the simulator is the
plain one: the same `cycle()` (D1–D8, R1–R5), the same charging at attempt
ends (F3, F4) and at R3 releases, the same promotion from personal queues (Q5), D6 while
maintenance is not NORMAL. What is assumed:

- a running job ends at its start + time limit; without a limit, after its predicted duration;
  with neither it never ends within the estimate (the GPUs it holds stay held);
- a queued job, once started, runs as long as its limit (else its predicted duration);
- a job waiting on its dependencies (Q8) is promoted when its parents (jobs or whole arrays)
  start or end in the forward, so its estimate starts after its parents' estimated ends; an
  array's `%N` (Q7) and holds (Q9, never released: unknown) are honoured by the same promotion;
- nothing new is submitted and nothing is cancelled, no GPU goes down, no OOM;
- cycles are coalesced more coarsely than the live D8 gap: at least `resolution_s` apart, and
  `growth` × the distance from now (a week ahead costs a few hundred cycles, not thousands);
  a cycle decides who starts where, and each start is placed when its GPUs were let go of (or
  the change the cycle answers, if later), where the live dispatcher, cycling within 0.2 s of
  an end, starts it (`ForwardSim.dispatched`); a coarse cycle's choices among several ends
  remain an approximation.

Basis of an estimate: `limits` when every end the estimate played before the cycle that started
the job came from a time limit; `predicted` once some predicted duration has played (ends
reorder the queue through fair-share, so every later start depends on them); `unknown` when the
job did not start within the horizon or the cycle cap (or maintenance has no known end). An
`unknown` estimate says why (`Estimate.why`): maintenance with no announced end, the jobs holding
GPUs it could use that have neither a time limit nor a predicted duration, or the horizon or cycle
cap the estimate stopped at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import fields
from operator import attrgetter
from typing import Any, Literal

import msgspec

from jpu.config import (
    DEFAULT_DEMOTION_MARGIN,
    Cluster,
    DemotionMode,
    Node,
    ReservationBackfill,
    Tier,
)
from jpu.domain.cluster import ClusterState, GpuKey, Maintenance
from jpu.domain.codec import with_jobs
from jpu.domain.dependencies import ArrayProgress
from jpu.domain.runs import RecentRuns
from jpu.domain.states import PLACED, QUEUED, JobView
from jpu.events import JobDispatched, JobSubmitted, MaintenanceChanged
from jpu.policy.charging import Charge
from jpu.policy.model import LabUsage, MaintenanceState
from jpu.sim import backend
from jpu.sim.cluster import SimCluster
from jpu.sim.engine import Simulator
from jpu.sim.eventlog import EventLog
from jpu.sim.params import SimParams
from jpu.sim.state import END
from jpu.sim.workload import WorkloadJob

Basis = Literal["limits", "predicted", "unknown"]
BASES: tuple[Basis, ...] = ("limits", "predicted", "unknown")


class Assumed(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What the estimate assumes of one job it plays (`jpu.explain.estimate.assume`)."""

    duration_s: float | None = None  # how long it runs once started: its limit, else predicted
    basis: Basis = "unknown"  # where duration_s comes from
    ends_at: float | None = None  # a running job: when it ends (None: not within the estimate)


class Present(msgspec.Struct, frozen=True, kw_only=True):
    """The cluster as it stands at `now`, the forward's own: copies of what the dispatcher's fold
    holds (`taken`, on the event loop) and what the estimate assumes of every job in it. The
    forward builds its fold from it (`own_fold`, off the event loop) and plays it: a Present is
    played once (the fold changes its jobs in place)."""

    now: float
    jobs: list[JobView]  # copies of the jobs the forward plays (`taken`)
    assumed: dict[str, Assumed]  # job id -> how long it runs; one per job in `jobs`
    inventory: dict[tuple[str, str], int]  # (node, tier) -> GPUs
    down: frozenset[GpuKey] = frozenset()
    usage: dict[str, LabUsage] = {}  # with every charge the log owes (D1)
    maintenance: MaintenanceState = "NORMAL"
    tiers: dict[str, Tier]
    half_life_s: float
    limits: dict[str, int] = {}  # per-user max_active_jobs (Q5)
    max_active_jobs: int = 3
    # R6: the dispatcher's demotion mode, so the estimate plays the R3 the services play
    reservation_demotion: DemotionMode = "strict"
    reservation_demotion_margin: float = DEFAULT_DEMOTION_MARGIN
    reservation_backfill: ReservationBackfill = "off"  # R7: the dispatcher's, likewise
    # Q8: copies of the fold's arrays with a task left, so a job waiting on a whole array is
    # promoted when the array's last task ends in the forward (its parents' estimated ends)
    arrays: list[ArrayProgress] = []


class EstimateParams(msgspec.Struct, frozen=True, kw_only=True):
    horizon_s: float = 7 * 86400.0  # no estimate beyond now + horizon (unknown)
    max_cycles: int = 400  # cap on simulated cycles: bounds the CPU of one estimate
    # virtual cycles at least this far apart (two live periodic cycles, D3 cycle_s 5 s; for
    # the first ~5 min, where a coarse cycle's choice among several ends weighs most) ...
    resolution_s: float = 10.0
    growth: float = 0.03  # ... and at least this fraction of the distance from now
    maintenance_ends_at: float | None = None  # a known end of maintenance (else: unknown)
    policy: str = "jpu"  # the policy core to run (jpu.policy.POLICIES)
    frozen_usage: bool = False  # a baseline: no fair-share change at ends (Slurm-style)


class Estimate(msgspec.Struct, frozen=True, array_like=True, gc=False):
    start: float | None
    basis: Basis
    why: str | None = None  # unknown: why there is no start (a sentence for people)


class ForwardResult(msgspec.Struct, kw_only=True):
    at: float  # the `now` it was computed for
    estimates: dict[str, Estimate]  # every queued and personal-queue job
    cycles: int = 0  # simulated cycles
    reached: float = 0.0  # virtual time the estimate got to
    complete: bool = True  # every job got a start (no horizon or cycle cap hit)


# every field of a JobView, in order: `JobView(*_VALUES(job))` is a copy of `job` (its fields are
# immutable values), 4x faster than copy.copy of the slotted dataclass (10k jobs: 14 / 50 ms)
_VALUES = attrgetter(*(f.name for f in fields(JobView)))


def taken(state: ClusterState, played: Iterable[str]) -> list[JobView]:
    """Copies of the jobs the forward plays, taken from the live fold between two cycles (the
    fold changes its JobViews in place; the forward changes its copies)."""
    return [JobView(*_VALUES(state.jobs[i])) for i in played]


def own_fold(present: Present) -> ClusterState:
    """The forward's fold: the Present's jobs with what the fold derives from them
    (jpu.domain.codec.with_jobs, as a snapshot's load rebuilds it), inventory, down GPUs, usage
    and maintenance. No backfill (B4: it always yields, it never delays a start), no ended jobs,
    no log position or history: the forward's own log starts at 1."""
    fold = ClusterState(keep_ended=False, runs=_Unread())
    fold.inventory = dict(present.inventory)
    fold.down = set(present.down)
    fold.usage = dict(present.usage)
    fold.maintenance = Maintenance(state=present.maintenance)
    fold.arrays = {a.array_id: a for a in present.arrays}
    with_jobs(fold, present.jobs)
    return fold


class _Unread(RecentRuns):
    """The forward fold's run history: nobody reads it (every duration is assumed up front, in
    the `Present`), so the fold's record of each end is dropped."""

    def record(
        self, user: str, lab: str, num_gpus: int, run_s: float, limit_s: float | None = None
    ) -> None:
        return None


def _spec(j: JobView, a: Assumed, now: float) -> WorkloadJob:
    return WorkloadJob(
        id=j.job_id,
        lab=j.lab,
        user=j.user,
        submit_s=now,
        num_gpus=j.num_gpus,
        duration_s=math.inf if a.duration_s is None else a.duration_s,
        tiers=sorted(j.tiers) if j.tiers is not None else None,
        min_vram_gb=j.min_vram_gb,
        time_limit_s=j.time_limit_s,
    )


def _nodes(inventory: dict[tuple[str, str], int]) -> list[Node]:
    nodes: dict[str, dict[str, int]] = {}
    for (node, tier), count in inventory.items():
        nodes.setdefault(node, {})[tier] = count
    return [Node(name=n, gpus=c) for n, c in nodes.items()]


class ForwardSim(Simulator):
    """The simulator started mid-flight from a `Present` instead of from an empty cluster."""

    def __init__(self, present: Present, params: EstimateParams) -> None:
        now, fold, assumed = present.now, own_fold(present), present.assumed
        sim_params = SimParams(
            policy=params.policy,
            half_life_s=present.half_life_s,
            cycle_s=max(params.resolution_s, 1.0),
            min_cycle_gap_s=params.resolution_s,
            max_active_jobs=present.max_active_jobs,
            backfill=False,  # B4: backfill always yields, it never delays a start
        )
        cluster = Cluster(
            tiers=list(present.tiers.values()),
            nodes=_nodes(fold.inventory),
            reservation_demotion=present.reservation_demotion,
            reservation_demotion_margin=present.reservation_demotion_margin,
            reservation_backfill=present.reservation_backfill,
        )
        jobs = list(fold.jobs.values())
        specs = [_spec(j, assumed[j.job_id], now) for j in jobs]
        super().__init__(cluster, specs, sim_params, EventLog(None))
        self.est = params
        self.origin = self.now = now
        self.limits = dict(present.limits)
        self.basis = {i: a.basis for i, a in assumed.items()}
        # jobs that never end within the estimate once they hold GPUs (no limit, no prediction)
        self.endless = {i for i, a in assumed.items() if a.duration_s is None and a.ends_at is None}
        self.predicted_since = math.inf  # first virtual time a predicted duration played
        self.asked_at = now  # when the change the next cycle answers happened (touch)
        self.decided: dict[str, float] = {}  # job id -> the cycle that first dispatched it
        self.targets = [j.job_id for j in jobs if j.state in QUEUED]
        self.targets += [i for pq in fold.personal.values() for i in pq]
        self._start(fold, assumed)

    def _start(self, state: ClusterState, assumed: dict[str, Assumed]) -> None:
        """Take over the fold (nothing reacts to it: it is the past) and play on: the simulated
        backend's record of each job, each running job's end."""
        self.state = state
        self.cluster = SimCluster(state, self.now, idle_clocks=False)  # no backfill (B4)
        for j in state.jobs.values():
            self.submitted[j.job_id] = _submitted(j)
            if j.placement is None or j.state not in PLACED:
                continue
            node, tier, held = j.placement
            self.running[j.job_id] = JobDispatched(
                event_id="", ts=j.dispatched_at or self.now, job_id=j.job_id, attempt=j.attempt,
                node=node, tier=tier, gpus=list(held),
            )  # fmt: skip
            end = assumed[j.job_id].ends_at
            if end is not None:  # unknown: never ends within the estimate
                self.at(max(self.now, end), END, (j.job_id, j.attempt))

    # --- the coarser cycle cadence (see the module docstring) ------------------------------

    def next_cycle_at(self) -> float:
        self.asked_at = self.now  # (asked by `touch` when no cycle is due: a change happened)
        e = self.est
        gap = max(e.resolution_s, e.growth * (self.now - self.origin))
        return max(self.now, self._last_cycle + gap)

    def dispatched(self, event: JobDispatched) -> JobDispatched:
        """Sub-cycle start times: a dispatch happens when its GPUs were let go of (or when the
        change this cycle answers happened, or the job entered the global queue, if later),
        not at the coarse cycle's time. The live dispatcher cycles within `min_cycle_gap_s`
        (0.2 s) of that change; stamping the cycle's time made every start up to a gap
        (then ≥ 60 s, 3 % of the distance from now) late, and every start after it on those GPUs
        too. The cycle still decides who starts where (D1–D8, R1–R5); a reservation the
        dispatch releases is still charged to the cycle's time (at most a gap counted twice)."""
        self.decided.setdefault(event.job_id, self.now)
        freed, job = self.cluster.freed_at, self.state.jobs.get(event.job_id)
        entered = job.queue_entered_at if job is not None else None
        node, tier, origin = event.node, event.tier, self.origin
        t = max(
            self.asked_at,
            origin if entered is None else entered,
            *[freed.get((node, tier, i), origin) for i in event.gpus],
        )
        return event if t >= event.ts else msgspec.structs.replace(event, ts=t)

    def handlers(self) -> dict[int, Callable[[Simulator, Any], None]]:
        h = super().handlers()
        h[END] = ForwardSim._on_end
        return h

    @staticmethod
    def _on_end(sim: Simulator, item: tuple[str, int]) -> None:
        assert isinstance(sim, ForwardSim)
        job_id, attempt = item
        job = sim.state.jobs.get(job_id)
        running = job is not None and job.state in PLACED and job.attempt == attempt
        if running and sim.basis[job_id] != "limits":
            sim.predicted_since = min(sim.predicted_since, sim.now)
        backend.on_end(sim, item)

    def settle(self, c: Charge) -> None:
        if self.est.frozen_usage:  # a baseline: the order does not change, GPUs still do
            self.state.owed.pop(c.charge_id, None)
            self.touch()
            return
        super().settle(c)

    # --- run -------------------------------------------------------------------------------

    def _waiting(self) -> bool:
        return bool(self.state.queue) or any(self.state.personal.values())

    def forward(self) -> ForwardResult:
        e = self.est
        until = self.origin + e.horizon_s
        handlers = self.handlers()
        resume = e.maintenance_ends_at if self.state.maintenance.state != "NORMAL" else None
        if self.state.maintenance.state != "NORMAL" and resume is None:
            until = self.origin  # D6: nothing starts before an end nobody has announced
        self.touch()
        while self._waiting() and self.totals.cycles < e.max_cycles:
            t = self.next_time()
            if resume is not None and resume <= min(t, until):
                self.now, resume = max(self.now, resume), None
                # M4: queued jobs dispatch in priority order
                self.append(
                    MaintenanceChanged(event_id="", ts=self.now, state="NORMAL", by="estimate")
                )
                continue
            if t > until:
                break
            self.step(handlers)
        return self._result()

    def _why_unknown(self, job_id: str) -> str:
        """Why `job_id` got no start: the first of maintenance, a hold (Q9), GPUs held for ever,
        the cap."""
        if self.state.maintenance.state != "NORMAL":
            return "maintenance is in progress and nobody has announced its end"
        job = self.state.jobs[job_id]
        if job.held:  # Q9: nothing in the estimate releases it
            return "it is held: it can start only once released (jpu release)"
        held: list[str] = []
        for other in sorted(self.endless - {job_id}):
            view = self.state.jobs.get(other)
            if view is None or view.placement is None or view.state not in PLACED:
                continue
            tier = self.tiers.get(view.placement[1])
            fits = tier is not None and (job.tiers is None or tier.name in job.tiers)
            if fits and tier is not None and tier.vram_gb >= (job.min_vram_gb or 0):
                held.append(other)
        if held:
            more = f" and {len(held) - 3} more" if len(held) > 3 else ""
            return (
                f"the GPUs it can use are held by {', '.join(held[:3])}{more}, with no time "
                "limit and no prediction of when they end"
            )
        if self.totals.cycles >= self.est.max_cycles:
            return f"the estimate stopped after {self.est.max_cycles} simulated cycles"
        days = self.est.horizon_s / 86400
        return f"it does not start within the estimate's horizon ({days:g} days)"

    def _result(self) -> ForwardResult:
        out: dict[str, Estimate] = {}
        complete = True
        for job_id in self.targets:
            start = self.outcomes[job_id].first_dispatch_at
            if start is None:
                out[job_id] = Estimate(None, "unknown", self._why_unknown(job_id))
                complete = False
            else:
                # the basis of the decision: what had played when the cycle dispatched it
                at = self.decided.get(job_id, start)
                out[job_id] = Estimate(
                    start, "predicted" if at >= self.predicted_since else "limits"
                )
        return ForwardResult(
            at=self.origin,
            estimates=out,
            cycles=self.totals.cycles,
            reached=self.now,
            complete=complete,
        )


def _submitted(j: JobView) -> JobSubmitted:
    """The simulated backend's record of the job's request (what the agent keeps per job)."""
    return JobSubmitted(
        event_id="", ts=j.submitted_at, job_id=j.job_id, lab=j.lab, user=j.user, name=j.name,
        command="", num_gpus=j.num_gpus, tiers=None if j.tiers is None else sorted(j.tiers),
        min_vram_gb=j.min_vram_gb, time_limit_s=j.time_limit_s,
    )  # fmt: skip


def forward(present: Present, params: EstimateParams | None = None) -> ForwardResult:
    """Every queued job's estimated start and its basis (SPEC U4). Plays `present.fold`: a
    Present is played once."""
    return ForwardSim(present, params or EstimateParams()).forward()
