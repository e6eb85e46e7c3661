"""Forward estimate of when queued jobs start (SPEC U4): the simulator, seeded with the cluster as
it stands now, runs the services' own policy core forward on a virtual clock. Pure: `now` is the
`Present`'s, no I/O.

Nothing here decides anything the simulator does not: the same `cycle()` (D1–D8, R1–R5), the same
charging at attempt ends (F3, F4) and at R3 releases, the same promotion from personal queues
(Q5), D6 while maintenance is not NORMAL. What is assumed:

- a running job ends at its start + time limit; without a limit, after its predicted duration;
  with neither it never ends within the estimate (the GPUs it holds stay held);
- a queued job, once started, runs as long as its limit (else its predicted duration);
- nothing new is submitted and nothing is cancelled, no GPU goes down, no OOM;
- cycles are coalesced more coarsely than the live D8 gap: at least `resolution_s` apart, and
  `growth` × the distance from now (so the error this adds stays a small fraction of the wait,
  and a week ahead costs a few hundred cycles, not thousands).

Basis of an estimate: `limits` when every end the estimate played before the job's start came
from a time limit; `predicted` once some predicted duration has played (ends reorder the queue
through fair-share, so every later start depends on them); `unknown` when the job did not start
within the horizon or the cycle cap (or maintenance has no known end).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from jpu.config import DEFAULT_DEMOTION_MARGIN, Cluster, DemotionMode, Tier
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import Gpu, LabUsage, MaintenanceState, QueuedJob, RunningJob
from jpu.sim import attempts
from jpu.sim.cluster import SimCluster
from jpu.sim.engine import Simulator
from jpu.sim.eventlog import EventLog
from jpu.sim.params import SimParams
from jpu.sim.state import END, GLOBAL, RESERVING, RUNNING, Held, SimJob
from jpu.sim.workload import WorkloadJob

Basis = Literal["limits", "predicted", "unknown"]
BASES: tuple[Basis, ...] = ("limits", "predicted", "unknown")


class ForwardJob(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A job as the estimate plays it: its request and how long it runs once started."""

    job_id: str
    lab: str
    user: str
    num_gpus: int
    tiers: frozenset[str] | None = None
    min_vram_gb: int | None = None
    time_limit_s: float | None = None
    attempt: int = 1
    duration_s: float | None = None  # its limit, else predicted; None: unknown
    basis: Basis = "unknown"  # where duration_s comes from


class RunningNow(msgspec.Struct, frozen=True, kw_only=True):
    job: ForwardJob
    node: str
    tier: str
    gpus: tuple[int, ...]
    started_at: float
    ends_at: float | None = None  # overrides started_at + duration (e.g. a cancel in progress)
    uncharged_gpu_s: float = 0.0  # reservation time riding with this attempt (R4, F4)
    uncharged_cost: float = 0.0


class QueuedNow(msgspec.Struct, frozen=True, kw_only=True):
    job: ForwardJob
    record: QueuedJob  # exactly what the dispatcher's cycle sees (queue_entered_at, reservation)
    uncharged_gpu_s: float = 0.0
    uncharged_cost: float = 0.0


class Present(msgspec.Struct, frozen=True, kw_only=True):
    """The cluster as it stands at `now`: what the dispatcher's Snapshot holds, plus what the
    simulator needs to play it forward (running jobs' starts, personal queues, slots)."""

    now: float
    tiers: dict[str, Tier]
    gpus: list[Gpu]
    usage: dict[str, LabUsage]  # with every charge the log owes (D1)
    half_life_s: float
    maintenance: MaintenanceState = "NORMAL"
    running: list[RunningNow] = []
    queued: list[QueuedNow] = []
    personal: dict[str, list[ForwardJob]] = {}  # user -> personal queue, oldest first (Q4)
    limits: dict[str, int] = {}  # per-user max_active_jobs (Q5)
    max_active_jobs: int = 3
    # R6: the dispatcher's demotion mode, so the estimate plays the R3 the services play
    reservation_demotion: DemotionMode = "strict"
    reservation_demotion_margin: float = DEFAULT_DEMOTION_MARGIN


class EstimateParams(msgspec.Struct, frozen=True, kw_only=True):
    horizon_s: float = 7 * 86400.0  # no estimate beyond now + horizon (unknown)
    max_cycles: int = 400  # cap on simulated cycles: bounds the CPU of one estimate
    resolution_s: float = 60.0  # virtual cycles at least this far apart ...
    growth: float = 0.03  # ... and at least this fraction of the distance from now
    maintenance_ends_at: float | None = None  # a known end of maintenance (else: unknown)
    policy: str = "jpu"  # the policy core to run (jpu.policy.POLICIES)
    frozen_usage: bool = False  # a baseline: no fair-share change at ends (Slurm-style)


class Estimate(msgspec.Struct, frozen=True, array_like=True, gc=False):
    start: float | None
    basis: Basis


class ForwardResult(msgspec.Struct, kw_only=True):
    at: float  # the `now` it was computed for
    estimates: dict[str, Estimate]  # every queued and personal-queue job
    cycles: int = 0  # simulated cycles
    reached: float = 0.0  # virtual time the estimate got to
    complete: bool = True  # every job got a start (no horizon or cycle cap hit)


def _spec(j: ForwardJob, now: float) -> WorkloadJob:
    return WorkloadJob(
        id=j.job_id,
        lab=j.lab,
        user=j.user,
        submit_s=now,
        num_gpus=j.num_gpus,
        duration_s=math.inf if j.duration_s is None else j.duration_s,
        tiers=sorted(j.tiers) if j.tiers is not None else None,
        min_vram_gb=j.min_vram_gb,
        time_limit_s=j.time_limit_s,
    )


class ForwardSim(Simulator):
    """The simulator started mid-flight from a `Present` instead of from an empty cluster."""

    def __init__(self, present: Present, params: EstimateParams) -> None:
        now = present.now
        fjobs = [r.job for r in present.running] + [q.job for q in present.queued]
        fjobs += [j for pq in present.personal.values() for j in pq]
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
            nodes=[],
            reservation_demotion=present.reservation_demotion,
            reservation_demotion_margin=present.reservation_demotion_margin,
        )
        super().__init__(cluster, [_spec(j, now) for j in fjobs], sim_params, EventLog(None))
        self.est = params
        self.origin = self.now = now
        self.cluster = SimCluster.from_rows(present.gpus, now)
        self.usage = dict(present.usage)
        self.limits = dict(present.limits)
        self.maintenance = present.maintenance
        self.basis = {j.job_id: j.basis for j in fjobs}
        self.predicted_since = math.inf  # first virtual time a predicted duration played
        self.targets = [q.job.job_id for q in present.queued]
        self.targets += [j.job_id for pq in present.personal.values() for j in pq]
        self._seed(present)

    def _seed(self, present: Present) -> None:
        for r in present.running:
            job = self.jobs[r.job.job_id]
            job.state, job.attempt = RUNNING, r.job.attempt
            job.node, job.tier, job.gpus, job.started_at = r.node, r.tier, r.gpus, r.started_at
            job.uncharged_reserved_gpu_s, job.uncharged_reserved_cost = (
                r.uncharged_gpu_s,
                r.uncharged_cost,
            )
            self.running[job.spec.id] = RunningJob(
                job_id=job.spec.id,
                lab=job.spec.lab,
                node=r.node,
                tier=r.tier,
                gpus=r.gpus,
                started_at=r.started_at,
                time_limit_s=r.job.time_limit_s,
            )
            self._slot(job)
            end = r.ends_at
            if end is None and r.job.duration_s is not None:
                end = r.started_at + r.job.duration_s
            if end is not None:  # unknown: never ends within the estimate
                self.at(max(self.now, end), END, (job, job.attempt))
        records = []
        for q in present.queued:
            job = self.jobs[q.job.job_id]
            rec = q.record
            job.state, job.attempt, job.min_vram_gb = GLOBAL, rec.attempt, rec.min_vram_gb
            job.queue_entered_at = rec.queue_entered_at
            job.uncharged_reserved_gpu_s, job.uncharged_reserved_cost = (
                q.uncharged_gpu_s,
                q.uncharged_cost,
            )
            res = rec.reservation
            if res is not None:
                job.state = RESERVING
                job.held = Held(res.node, res.tier, res.since, res.joined_at())
                self.reserving += 1
            records.append(rec)
            self._slot(job)
        self.queue = LabQueues(records)
        for user, pq in present.personal.items():
            self.personal[user] = deque(self.jobs[j.job_id] for j in pq)

    def _slot(self, job: SimJob) -> None:
        self.active[job.spec.user] = self.active.get(job.spec.user, 0) + 1

    # --- the coarser cycle cadence (see the module docstring) ------------------------------

    def next_cycle_at(self) -> float:
        e = self.est
        gap = max(e.resolution_s, e.growth * (self.now - self.origin))
        return max(self.now, self._last_cycle + gap)

    def handlers(self) -> dict[int, Callable[[Simulator, Any], None]]:
        h = super().handlers()
        h[END] = ForwardSim._on_end
        return h

    @staticmethod
    def _on_end(sim: Simulator, item: tuple[SimJob, int]) -> None:
        assert isinstance(sim, ForwardSim)
        self = sim
        job, attempt = item
        if job.state == RUNNING and job.attempt == attempt and self.basis[job.spec.id] != "limits":
            self.predicted_since = min(self.predicted_since, self.now)
        attempts.on_end(self, item)

    def charge(self, job: SimJob, amount: float, reason: str, source_event_id: str) -> None:
        if self.est.frozen_usage:
            self.touch()  # the GPUs still changed hands; the order does not
            return
        super().charge(job, amount, reason, source_event_id)

    # --- run -------------------------------------------------------------------------------

    def _waiting(self) -> bool:
        return bool(self.queue) or any(self.personal.values())

    def forward(self) -> ForwardResult:
        e = self.est
        until = self.origin + e.horizon_s
        handlers = self.handlers()
        resume = e.maintenance_ends_at if self.maintenance != "NORMAL" else None
        if self.maintenance != "NORMAL" and resume is None:
            until = self.origin  # D6: nothing starts before an end nobody has announced
        self.touch()
        while self._waiting() and self.totals.cycles < e.max_cycles:
            t = self.next_time()
            if resume is not None and resume <= min(t, until):
                self.now, resume = max(self.now, resume), None
                self.maintenance = "NORMAL"  # M4: queued jobs dispatch in priority order
                self.touch()
                continue
            if t > until:
                break
            self.step(handlers)
        return self._result()

    def _result(self) -> ForwardResult:
        out: dict[str, Estimate] = {}
        complete = True
        for job_id in self.targets:
            start = self.jobs[job_id].first_dispatch_at
            if start is None:
                out[job_id] = Estimate(None, "unknown")
                complete = False
            else:
                out[job_id] = Estimate(
                    start, "predicted" if start >= self.predicted_since else "limits"
                )
        return ForwardResult(
            at=self.origin,
            estimates=out,
            cycles=self.totals.cycles,
            reached=self.now,
            complete=complete,
        )


def forward(present: Present, params: EstimateParams | None = None) -> ForwardResult:
    """Every queued job's estimated start and its basis (SPEC U4)."""
    return ForwardSim(present, params or EstimateParams()).forward()


# --- the simulator's own state as a Present (the accuracy benchmark estimates inside a run) ----

DurationOf = Callable[[SimJob], tuple[float | None, Basis]]


def present_of(sim: Simulator, duration_of: DurationOf) -> Present:
    """The simulator's state at `sim.now` as a `Present` (what its dispatcher would see)."""

    def fjob(j: SimJob) -> ForwardJob:
        d, basis = duration_of(j)
        s = j.spec
        return ForwardJob(
            job_id=s.id,
            lab=s.lab,
            user=s.user,
            num_gpus=s.num_gpus,
            tiers=frozenset(s.tiers) if s.tiers is not None else None,
            min_vram_gb=j.min_vram_gb,
            time_limit_s=s.time_limit_s,
            attempt=j.attempt,
            duration_s=d,
            basis=basis,
        )

    running = []
    for r in sim.running.values():
        j = sim.jobs[r.job_id]
        running.append(
            RunningNow(
                job=fjob(j),
                node=r.node,
                tier=r.tier,
                gpus=r.gpus,
                started_at=r.started_at,
                uncharged_gpu_s=j.uncharged_reserved_gpu_s,
                uncharged_cost=j.uncharged_reserved_cost,
            )
        )
    queued = [
        QueuedNow(
            job=fjob(sim.jobs[q.job_id]),
            record=q,
            uncharged_gpu_s=sim.jobs[q.job_id].uncharged_reserved_gpu_s,
            uncharged_cost=sim.jobs[q.job_id].uncharged_reserved_cost,
        )
        for q in sim.queue
    ]
    return Present(
        now=sim.now,
        tiers=sim.tiers,
        gpus=list(sim.cluster.gpus),
        usage=dict(sim.usage),
        half_life_s=sim.params.half_life_s,
        maintenance=sim.maintenance,
        running=running,
        queued=queued,
        personal={u: [fjob(j) for j in pq] for u, pq in sim.personal.items() if pq},
        limits=dict(sim.limits),
        max_active_jobs=sim.params.max_active_jobs,
    )
