"""Forward estimate of when queued jobs start (SPEC U4): the simulator, seeded with the cluster as
it stands now, runs the services' own policy core forward on a virtual clock. Pure: `now` is the
`Present`'s, no I/O.

The `Present` is turned into the events that lead to it (submitted, promoted, reserved,
dispatched, started: `seed_events`) and folded by the services' fold, so from there on the
simulator is the plain one: the same `cycle()` (D1–D8, R1–R5), the same charging at attempt
ends (F3, F4) and at R3 releases, the same promotion from personal queues (Q5), D6 while
maintenance is not NORMAL. What is assumed:

- a running job ends at its start + time limit; without a limit, after its predicted duration;
  with neither it never ends within the estimate (the GPUs it holds stay held);
- a queued job, once started, runs as long as its limit (else its predicted duration);
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
from collections.abc import Callable
from typing import Any, Literal, cast

import msgspec

from jpu.config import DEFAULT_DEMOTION_MARGIN, Cluster, DemotionMode, Node, Tier
from jpu.domain.cluster import evolve
from jpu.domain.states import PLACED
from jpu.events import (
    AnyEvent,
    Delivered,
    Event,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationStarted,
    UsageCharged,
)
from jpu.policy.charging import Charge
from jpu.policy.model import Gpu, LabUsage, MaintenanceState, QueuedJob, Reservation
from jpu.sim import attempts
from jpu.sim.cluster import SimCluster
from jpu.sim.engine import Simulator
from jpu.sim.eventlog import EventLog
from jpu.sim.params import SimParams
from jpu.sim.state import END
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


def _nodes(rows: list[Gpu]) -> list[Node]:
    counts: dict[str, dict[str, int]] = {}
    for g in rows:
        per = counts.setdefault(g.node, {})
        per[g.tier] = max(per.get(g.tier, 0), g.index + 1)
    return [Node(name=n, gpus=c) for n, c in counts.items()]


def seed_events(present: Present) -> list[Event]:
    """Events whose fold is the `Present`: GPUs down, usage, maintenance, then each job's life
    so far (its uncharged reservation time as a released reservation, R4)."""
    now = present.now
    out: list[Event] = []
    down: dict[str, dict[str, list[int]]] = {}
    for g in present.gpus:
        if g.state == "down":
            down.setdefault(g.node, {}).setdefault(g.tier, []).append(g.index)
    for node in _nodes(present.gpus):
        if node.name in down:
            out.append(
                NodeInventoryObserved(
                    event_id="", ts=now, node=node.name, gpus=node.gpus, down=down[node.name]
                )
            )
    for lab, u in sorted(present.usage.items()):
        out.append(
            UsageCharged(
                event_id=f"init-{lab}", ts=u.as_of, lab=lab, amount=0.0, value_after=u.value,
                as_of=u.as_of, reason="initial",
            )
        )  # fmt: skip
    if present.maintenance != "NORMAL":
        out.append(
            MaintenanceChanged(event_id="", ts=now, state=present.maintenance, by="estimate")
        )
    any_tier = next(iter(present.tiers), "")

    def submitted(j: ForwardJob, min_vram_gb: int | None) -> JobSubmitted:
        return JobSubmitted(
            event_id="", ts=now, job_id=j.job_id, lab=j.lab, user=j.user, name=j.job_id,
            command="", num_gpus=j.num_gpus, tiers=None if j.tiers is None else sorted(j.tiers),
            min_vram_gb=min_vram_gb, time_limit_s=cast(int | None, j.time_limit_s),
        )  # fmt: skip

    def promoted(j: ForwardJob, entered: float, gpu_s: float, cost: float) -> list[Event]:
        jid = j.job_id
        evs: list[Event] = [JobPromoted(event_id="", ts=now, job_id=jid, queue_entered_at=entered)]
        if gpu_s > 0:  # R4: held earlier, charged with this attempt's end
            evs.append(
                ReservationStarted(event_id="", ts=now, job_id=jid, node="", tier=any_tier, gpus=[])
            )
            evs.append(
                ReservationReleased(
                    event_id="", ts=now, job_id=jid, node="", tier=any_tier, gpus=[],
                    reason="swap", gpu_seconds=gpu_s, charged_now=False, tflops=cost / gpu_s,
                )
            )  # fmt: skip
        return evs

    for r in present.running:
        j = r.job
        out.append(submitted(j, j.min_vram_gb))
        out += promoted(j, r.started_at, r.uncharged_gpu_s, r.uncharged_cost)
        t, jid = r.started_at, j.job_id
        out.append(
            JobDispatched(
                event_id="", ts=t, job_id=jid, attempt=j.attempt, node=r.node, tier=r.tier,
                gpus=list(r.gpus),
            )
        )  # fmt: skip
        out.append(JobStarted(event_id="", ts=t, job_id=jid, attempt=j.attempt, backend_job_id=""))
    for q in present.queued:
        j, rec = q.job, q.record
        out.append(submitted(j, rec.min_vram_gb))  # a retry (below) sets its own
        out += promoted(j, rec.queue_entered_at, q.uncharged_gpu_s, q.uncharged_cost)
        if rec.attempt > 1:  # X8: an earlier attempt ran out of GPU memory and was retried
            out += _retried(j.job_id, rec, now)
        if rec.reservation is not None:
            out += _reserved(j.job_id, rec.reservation)
    for pq in present.personal.values():
        out += [submitted(j, j.min_vram_gb) for j in pq]
    return out


def _retried(jid: str, rec: QueuedJob, now: float) -> list[Event]:
    before = rec.attempt - 1
    return [
        JobDispatched(event_id="", ts=now, job_id=jid, attempt=before, node="", tier="", gpus=[]),
        JobEnded(event_id="", ts=now, job_id=jid, attempt=before, state="FAILED", oom=True),
        JobRetryScheduled(
            event_id="", ts=now, job_id=jid, attempt=rec.attempt, min_vram_gb=rec.min_vram_gb or 0
        ),
    ]


def _reserved(jid: str, r: Reservation) -> list[Event]:
    """The reservation as it was taken: the GPUs of its start, then each later one (F2)."""
    joined = r.joined_at()
    times = sorted(set(joined.values())) or [r.since]
    first = [i for i in r.gpus if joined.get(i, r.since) == times[0]]
    out: list[Event] = [
        ReservationStarted(
            event_id="", ts=min(r.since, times[0]), job_id=jid, node=r.node, tier=r.tier, gpus=first
        )
    ]
    held = list(first)
    for t in times[1:]:
        added = [i for i in r.gpus if joined[i] == t]
        held += added
        out.append(
            ReservationGrown(
                event_id="", ts=t, job_id=jid, node=r.node, tier=r.tier, gpus=list(held),
                added=added,
            )
        )  # fmt: skip
    return out


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
            nodes=_nodes(present.gpus),
            reservation_demotion=present.reservation_demotion,
            reservation_demotion_margin=present.reservation_demotion_margin,
        )
        super().__init__(cluster, [_spec(j, now) for j in fjobs], sim_params, EventLog(None))
        self.est = params
        self.origin = self.now = now
        self.limits = dict(present.limits)
        self.basis = {j.job_id: j.basis for j in fjobs}
        self.fjobs = {j.job_id: j for j in fjobs}
        # jobs that never end within the estimate once they hold GPUs (no limit, no prediction)
        self.endless = {j.job_id for j in fjobs if j.duration_s is None}
        self.endless -= {r.job.job_id for r in present.running if r.ends_at is not None}
        self.predicted_since = math.inf  # first virtual time a predicted duration played
        self.asked_at = now  # when the change the next cycle answers happened (touch)
        self.decided: dict[str, float] = {}  # job id -> the cycle that first dispatched it
        self.targets = [q.job.job_id for q in present.queued]
        self.targets += [j.job_id for pq in present.personal.values() for j in pq]
        self._seed(present)

    def _seed(self, present: Present) -> None:
        """Fold the events that lead to `present` (nothing reacts to them: it is the past)."""
        for event in seed_events(present):
            event = self.log.append(event)
            evolve(self.state, Delivered(self.log.count, "", cast(AnyEvent, event), {}))
            if isinstance(event, JobSubmitted):
                self.submitted[event.job_id] = event
        self.cluster = SimCluster(self.state, self.now)
        for r in present.running:
            j = r.job
            self.running[j.job_id] = JobDispatched(
                event_id="", ts=r.started_at, job_id=j.job_id, attempt=j.attempt, node=r.node,
                tier=r.tier, gpus=list(r.gpus),
            )  # fmt: skip
            end = r.ends_at
            if end is None and j.duration_s is not None:
                end = r.started_at + j.duration_s
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
        t = max(self.asked_at, self.origin if entered is None else entered)
        for i in event.gpus:
            t = max(t, freed.get((event.node, event.tier, i), self.origin))
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
        running = job is not None and job.state == "RUNNING" and job.attempt == attempt
        if running and sim.basis[job_id] != "limits":
            sim.predicted_since = min(sim.predicted_since, sim.now)
        attempts.on_end(sim, item)

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
        """Why `job_id` got no start: the first of maintenance, GPUs held for ever, the cap."""
        if self.state.maintenance.state != "NORMAL":
            return "maintenance is in progress and nobody has announced its end"
        job = self.fjobs[job_id]
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


def forward(present: Present, params: EstimateParams | None = None) -> ForwardResult:
    """Every queued job's estimated start and its basis (SPEC U4)."""
    return ForwardSim(present, params or EstimateParams()).forward()
