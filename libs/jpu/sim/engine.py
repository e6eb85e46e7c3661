"""Discrete-event engine: a virtual clock, a heap of timed happenings, and the services' core.

The job lifecycle is the services' fold: every event the simulator appends goes through
`jpu.domain.cluster.evolve` into a `ClusterState`, exactly as the services follow the log, and
each decision is the function the service itself calls on that state: intake's promotion
(jpu.domain.promotion: Q5, Q8, Q9) and Q2 check, the dispatcher's cycle on
`jpu.domain.dispatch.snapshot` and its duties (jpu.domain.dispatch), the slurm-agent's
`JobEnded` (jpu.domain.ending), accounting's charge (jpu.policy.charging). The simulator
itself keeps only the clock, the simulated cluster (backend.py, backfill_service.py), the workload
and the summary; it never branches on "simulation" inside a decision.
Phases at one instant run in a fixed order (ends, cancels, arrivals, backfill, cycle) so a cycle
sees everything that happened at its time, and two runs of one input are identical.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

from jpu.config import Cluster, Config
from jpu.domain import dispatch
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dispatch import TRIGGERS, snapshot
from jpu.domain.promotion import configured_limits, never_satisfied, to_promote
from jpu.domain.states import JobView
from jpu.domain.submission import never_satisfied_end
from jpu.events import (
    AnyEvent,
    BackfillEnded,
    Delivered,
    Event,
    JobDispatched,
    JobEnded,
    JobEvent,
    JobPromoted,
    JobRetryScheduled,
    JobSubmitted,
    ReservationReleased,
    UsageCharged,
)
from jpu.policy import POLICIES
from jpu.policy.charging import Charge, charge_id, usage_charged
from jpu.policy.fairshare import ZERO_USAGE
from jpu.policy.model import CycleResult, Snapshot
from jpu.sim import backend, backfill_service, cycles
from jpu.sim.cluster import SimCluster
from jpu.sim.eventlog import EventLog
from jpu.sim.params import SimParams
from jpu.sim.state import (
    ARRIVAL,
    BACKFILL,
    CANCEL,
    CYCLE,
    END,
    REJECTED,
    RELEASE,
    Outcome,
    Totals,
)
from jpu.sim.workload import WorkloadError, WorkloadJob
from jpu.sim.world import FitKey

E = TypeVar("E", bound=Event)
Progress = Callable[[int, int, float], None]  # (jobs terminal, jobs total, virtual time)
CycleHook = Callable[[int, float, Snapshot, CycleResult], None]  # (state seq, time, ...)


# D8: what makes the dispatcher cycle again (decide.TRIGGERS), but for what the simulated cycle
# did itself: a backfill its dispatch preempted (B2), a reservation `dispatched` into its job
# (`append`). By exact type (event classes are never subclassed): this runs for every event.
_TRIGGERS = frozenset(TRIGGERS) - {BackfillEnded}
_NO_HEADERS: dict[str, str] = {}  # the simulated log's events carry none (the fold reads none)


def services_config(cluster: Cluster, params: SimParams) -> Config:
    """The services' configuration the simulated services run with (SimParams = its knobs)."""
    return Config(
        tiers=cluster.tiers,
        nodes=cluster.nodes,
        labs=cluster.labs,
        reservation_demotion=params.reservation_demotion or cluster.reservation_demotion,
        reservation_demotion_margin=(
            cluster.reservation_demotion_margin
            if params.reservation_demotion_margin is None
            else params.reservation_demotion_margin
        ),
        reservation_backfill=params.reservation_backfill or cluster.reservation_backfill,  # R7
        half_life_s=params.half_life_s,
        cycle_s=params.cycle_s,
        min_cycle_gap_s=params.min_cycle_gap_s,
        max_active_jobs=params.max_active_jobs,
        max_attempts=params.max_attempts,
        backfill_enabled=params.backfill,
        backfill_settle_s=params.backfill_settle_s,
    )


def jobs_by_id(lines: list[WorkloadJob]) -> dict[str, WorkloadJob]:
    """Every job of the workload by id; an array's task ids must not clash with another id."""
    out: dict[str, WorkloadJob] = {}
    for line in lines:
        for job in backend.jobs_of(line):
            if job.id in out:
                raise WorkloadError(f"job id {job.id!r} appears twice (an array's task?)")
            out[job.id] = job
    return out


class Simulator:
    def __init__(
        self,
        cluster: Cluster,
        jobs: list[WorkloadJob],
        params: SimParams,
        log: EventLog,
        progress: Progress | None = None,
        on_cycle: CycleHook | None = None,
    ) -> None:
        self.params = params = params.resolved(cluster)
        self.config = services_config(cluster, params)
        self.policy = POLICIES[params.policy]
        self.tiers = {t.name: t for t in cluster.tiers}
        self.state = ClusterState.new(cluster, keep_ended=False)  # in-flight jobs (SPEC O6)
        self.cluster = SimCluster(self.state)
        self.log = log
        self.progress = progress
        self.on_cycle = on_cycle
        self.workload = jobs
        # every job the workload creates, an array's tasks each on their own (Q7)
        self.specs: dict[str, WorkloadJob] = jobs_by_id(jobs)
        self.outcomes: dict[str, Outcome] = {i: Outcome() for i in self.specs}
        # the simulated backend's record of in-flight jobs (what the agent folds per job)
        self.submitted: dict[str, JobSubmitted] = {}
        self.running: dict[str, JobDispatched] = {}  # job id -> the attempt it runs
        self.initial_usage = {lab.name: lab.usage for lab in cluster.labs if lab.usage}
        self.limits = configured_limits(cluster)
        self.fit_cache: dict[FitKey, bool] = {}
        self.policy_s = 0.0  # wall seconds inside the policy's cycle (for the bench)
        self.totals = Totals()
        self.now = 0.0
        self.done = 0
        self.woken: set[str] = set()  # Q8: users whose personal queue a parent's step moved
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._dirty = False
        self._cycle_at: float | None = None
        self._last_cycle = -math.inf
        self.duties_due = False  # a queued job's cancel or an OOM awaits the dispatcher (phase 0)

    # --- scheduling ------------------------------------------------------------------------

    def at(self, t: float, kind: int, obj: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, obj))

    def touch(self) -> None:
        """Something that can change a cycle's outcome happened (SPEC D8): cycle soon."""
        self._dirty = True
        if self._cycle_at is None:
            self._cycle_at = self.next_cycle_at()
            self.at(self._cycle_at, CYCLE)

    def next_cycle_at(self) -> float:
        """When the cycle a change asks for runs (a forward estimate coarsens this)."""
        p = self.params
        # D8: event-triggered, at most one per min_cycle_gap_s (inf = none at all) ...
        gap = p.min_cycle_gap_s
        coalesced = math.inf if gap == math.inf else max(self.now, self._last_cycle + gap)
        # ... and D3: the periodic cycle at the next multiple of cycle_s not yet cycled
        periodic = math.ceil(self.now / p.cycle_s) * p.cycle_s
        if self._last_cycle > -math.inf:
            periodic = max(periodic, (self._last_cycle // p.cycle_s + 1) * p.cycle_s)
        return min(coalesced, periodic)

    # --- the log: append, fold, react ------------------------------------------------------

    def append(self, event: E) -> E:
        """Append one event: into the log, through the services' fold, then what follows from
        it at once (accounting's charge, the summary's record, a D8 cycle)."""
        event = self.log.append(event)
        state = self.state
        evolve(state, Delivered(self.log.count, "", cast(AnyEvent, event), _NO_HEADERS))
        if state.just_woken:  # Q8: a parent started or ended; its children's users promote
            self.woken |= state.just_woken
        freed = self.cluster.folded(event, self.now, self.log.count)
        self.folded(event)
        ended = state.just_ended
        if freed:
            backfill_service.watch(self, freed)
        kind = type(event)
        if kind is JobDispatched:
            assert isinstance(event, JobDispatched)
            out = self.outcomes[event.job_id]
            out.tier = event.tier
            if out.first_dispatch_at is None:
                out.first_dispatch_at = event.ts
        elif kind is UsageCharged:
            assert isinstance(event, UsageCharged)
            if event.job_id is not None:
                self.outcomes[event.job_id].charged += event.amount
        elif kind is JobEnded or kind is ReservationReleased:
            assert isinstance(event, JobEnded | ReservationReleased)
            if isinstance(event, JobEnded):
                self.totals.run_gpu_s += event.gpu_seconds_startup + event.gpu_seconds_run
            else:
                self.totals.reserved_gpu_s += event.gpu_seconds
                self.totals.demotions += event.charged_now and event.reason == "demoted"
            c = state.owed.get(charge_id(event.event_id))
            if c is not None:
                self.settle(c)  # accounting's UsageCharged for what this event owes (F4)
        if ended is not None:
            self.finished(ended)
        if kind in _TRIGGERS and not (
            isinstance(event, ReservationReleased) and event.reason == "dispatched"
        ):
            self.touch()
        return event

    def dispatched(self, event: JobDispatched) -> JobDispatched:
        """A cycle's dispatch as it is appended (stamped with the cycle's time; a forward
        estimate, whose cycles are coarser, stamps it when its GPUs freed)."""
        return event

    def folded(self, event: Event) -> None:
        """Called right after the fold applied `event` (what a service's on_event sees)."""

    def settle(self, c: Charge) -> None:
        """Accounting: the charge's UsageCharged, on the lab's usage as the fold has it."""
        usage = self.state.usage.get(c.lab, ZERO_USAGE)
        self.append(usage_charged(c, usage, self.params.half_life_s))

    # --- run -------------------------------------------------------------------------------

    def run(self) -> float:
        """Simulate to the last job's end; returns the end time."""
        self.begin()
        total = len(self.specs)
        handlers = self.handlers()
        while self._heap and self.done < total:  # stop at the last job's end
            self.step(handlers)
        self.log.flush()
        ends = (o.ended_at for o in self.outcomes.values() if o.ended_at is not None)
        return max(ends, default=0.0)

    def begin(self) -> None:
        """Initial usage, the workload's arrivals and backfill, on the heap (nothing played)."""
        for lab, value in sorted(self.initial_usage.items()):
            self.settle(Charge(f"init-{lab}", lab, value, 0.0, None, "initial"))  # accounting
        self._heap.clear()  # no cycle for the initial usage: nothing is queued yet
        self._cycle_at, self._dirty = None, False
        for job in self.workload:
            self.at(job.submit_s, ARRIVAL, job)
        if self.params.backfill:
            backfill_service.schedule_initial(self)

    def handlers(self) -> dict[int, Callable[[Simulator, Any], None]]:
        return {
            END: backend.on_end,
            CANCEL: backend.on_cancel,
            RELEASE: backend.on_release,
            ARRIVAL: Simulator._on_arrival,
            BACKFILL: backfill_service.on_check,
            CYCLE: Simulator._on_cycle,
        }

    def next_time(self) -> float:
        """The virtual time of the next happening (inf when there is none)."""
        return self._heap[0][0] if self._heap else math.inf

    def step(self, handlers: dict[int, Callable[[Simulator, Any], None]]) -> None:
        """Play the next happening (the clock moves to its time)."""
        t, kind, _, obj = heapq.heappop(self._heap)
        self.now = t
        handlers[kind](self, obj)
        while self.woken:  # Q8, as intake does on the users a parent's step woke
            self.promote(self.woken.pop())

    # --- intake (SPEC Q2, Q4, Q5) ------------------------------------------------------------

    def _on_arrival(self, spec: WorkloadJob) -> None:
        if backend.submit(self, spec):
            self.promote(spec.user)

    def promote(self, user: str) -> None:
        """Q5, as intake decides it: the user's oldest eligible personal-queue jobs while slots
        are free (Q8, Q9: jpu.domain.promotion); a dependency never met ends its job (Q8)."""
        if not self.state.personal.get(user):
            return
        for job_id in never_satisfied(self.state, {user}):
            self.append(never_satisfied_end(self.state.jobs[job_id], self.now, ""))
        chosen = to_promote(self.state, {user}, self.limits, self.params.max_active_jobs)
        for job_id in chosen:
            self.append(
                JobPromoted(event_id="", ts=self.now, job_id=job_id, queue_entered_at=self.now)
            )

    def reject(self, spec: WorkloadJob) -> None:
        """Q2: refused at intake, never in the log."""
        out = self.outcomes[spec.id]
        out.final_state, out.reason = REJECTED, "NO_FIT_PLACEMENT"
        self._count()

    def finished(self, job: JobView) -> None:
        """A job left the fold's hot state for good (terminal, its OOM decided): record it."""
        self.submitted.pop(job.job_id, None)
        out = self.outcomes.get(job.job_id)
        if out is None:
            return
        end = job.last_end
        out.final_state, out.final_attempt = job.state, job.attempt
        out.ended_at = end.ts if end is not None else self.now
        out.reason = end.reason if end is not None else None
        self._count()

    def _count(self) -> None:
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, len(self.specs), self.now)

    # --- the dispatch cycle (SPEC D3) -----------------------------------------------------------

    def duties(self) -> None:
        """The dispatcher's phase 0, its own `duties` (jpu_services.dispatcher.service run_cycle):
        end the queued jobs whose cancel was requested (R5), decide each GPU OOM once (X8), step
        maintenance (M2/M3); then intake promotes into the slots that freed (Q5)."""
        self.duties_due = False
        state = self.state
        events = dispatch.duties(state, self.config, self.now)
        users = sorted({state.jobs[e.job_id].user for e in events if isinstance(e, JobEvent)})
        for e in events:
            self.totals.oom_retries += isinstance(e, JobRetryScheduled)
            self.append(e)
        for user in users:
            self.promote(user)

    def _on_cycle(self, _: object) -> None:
        self._cycle_at = None
        if not self._dirty:
            return
        self._dirty = False
        state = self.state
        if self.duties_due:
            self._last_cycle = self.now  # the dispatcher cycled, whatever the policy decides
            self.duties()
        # Nothing can be dispatched, reserved or demoted: the cycle would decide nothing.
        if not state.queue or (self.cluster.idle_count() == 0 and not self.cluster.reserving()):
            self.totals.cycles_skipped += 1
            return
        self.totals.cycles += 1
        self.totals.max_global_queue = max(self.totals.max_global_queue, len(state.queue))
        self._last_cycle = self.now
        snap = snapshot(
            state,
            self.config,
            self.params.half_life_s,
            gpu_rows=list(self.cluster.rows),
            running_jobs=list(self.cluster.running.values()),
        )
        t0 = time.perf_counter()
        result = self.policy(snap, self.now)
        self.policy_s += time.perf_counter() - t0
        if self.on_cycle is not None:
            self.on_cycle(state.seq, self.now, snap, result)
        cycles.apply(self, result)
