"""Discrete-event engine: a virtual clock, a heap of timed happenings, and the policy core.

The engine plays the services' parts (intake, dispatcher loop, slurm-agent, accounting, backfill)
around the very same pure policy functions; it never branches on "simulation" inside the policy.
Phases at one instant run in a fixed order (ends, cancels, arrivals, backfill, cycle) so a cycle
sees everything that happened at its time, and two runs of one input are identical.
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from collections.abc import Callable
from itertools import islice
from typing import Any

from jpu.config import Cluster
from jpu.events import UsageCharged
from jpu.policy import POLICIES, fairshare
from jpu.policy.charging import charge_id
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import LabUsage, MaintenanceState, RunningJob, Snapshot
from jpu.policy.queue import promotions
from jpu.sim import attempts, backfill, cycles
from jpu.sim.cluster import SimCluster
from jpu.sim.eventlog import EventLog
from jpu.sim.params import SimParams
from jpu.sim.state import ARRIVAL, BACKFILL, CANCEL, CYCLE, END, SimJob, Totals
from jpu.sim.workload import WorkloadJob

Progress = Callable[[int, int, float], None]  # (jobs terminal, jobs total, virtual time)


class Simulator:
    def __init__(
        self,
        cluster: Cluster,
        jobs: list[WorkloadJob],
        params: SimParams,
        log: EventLog,
        progress: Progress | None = None,
    ) -> None:
        self.params = params = params.resolved(cluster)
        self.policy = POLICIES[params.policy]
        self.tiers = {t.name: t for t in cluster.tiers}
        self.cluster = SimCluster(cluster)
        self.log = log
        self.progress = progress
        self.workload = jobs
        self.jobs: dict[str, SimJob] = {j.id: SimJob(j) for j in jobs}
        self.usage: dict[str, LabUsage] = {}
        self.initial_usage = {lab.name: lab.usage for lab in cluster.labs if lab.usage}
        self.limits = {
            u.name: u.max_active_jobs
            for lab in cluster.labs
            for u in lab.users
            if u.max_active_jobs is not None
        }
        self.personal: dict[str, deque[SimJob]] = {}
        self.active: dict[str, int] = {}  # user -> slot-holding jobs (SPEC S1)
        self.queue = LabQueues()  # the global queue by job id, kept up to date in place
        self.running: dict[str, RunningJob] = {}
        self.reserving = 0
        self.fit_cache: dict[tuple[int, frozenset[str] | None, int | None], bool] = {}
        self.policy_s = 0.0  # wall seconds inside the policy's cycle (for the bench)
        self.totals = Totals()
        self.now = 0.0
        self.done = 0
        self._heap: list[tuple[float, int, int, Any]] = []
        self._seq = 0
        self._dirty = False
        self._cycle_at: float | None = None
        self._last_cycle = -math.inf
        self.maintenance: MaintenanceState = "NORMAL"  # D6: a forward estimate may start in it

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

    # --- run -------------------------------------------------------------------------------

    def run(self) -> float:
        """Simulate to the last job's end; returns the end time."""
        self.begin()
        total = len(self.jobs)
        handlers = self.handlers()
        while self._heap and self.done < total:  # stop at the last job's end
            self.step(handlers)
        self.log.flush()
        return max((j.end_at for j in self.jobs.values() if j.end_at is not None), default=0.0)

    def begin(self) -> None:
        """Initial usage, the workload's arrivals and backfill, on the heap (nothing played)."""
        for lab, value in sorted(self.initial_usage.items()):
            self.usage[lab] = LabUsage(value, 0.0)
            self.log.emit(
                UsageCharged,
                0.0,
                lab=lab,
                amount=value,
                value_after=value,
                as_of=0.0,
                reason="initial",
            )
        for job in self.workload:
            self.at(job.submit_s, ARRIVAL, self.jobs[job.id])
        if self.params.backfill:
            backfill.schedule_initial(self)

    def handlers(self) -> dict[int, Callable[[Simulator, Any], None]]:
        return {
            END: attempts.on_end,
            CANCEL: attempts.on_cancel,
            ARRIVAL: Simulator._on_arrival,
            BACKFILL: backfill.on_check,
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

    # --- intake (SPEC Q2, Q4, Q5) ------------------------------------------------------------

    def _on_arrival(self, job: SimJob) -> None:
        if not attempts.submit(self, job):
            return
        self.personal.setdefault(job.spec.user, deque()).append(job)
        self.promote(job.spec.user)

    def limit(self, user: str) -> int:
        return self.limits.get(user, self.params.max_active_jobs)

    def promote(self, user: str) -> None:
        """Q5: while the user has a free slot, their oldest personal-queue job goes global."""
        pq = self.personal.get(user)
        if not pq:
            return
        limit = self.limit(user)
        head = {user: [j.spec.id for j in islice(pq, limit)]}  # only the oldest can go (Q5)
        for _ in promotions(head, self.active, self.limits, self.params.max_active_jobs):
            job = pq.popleft()
            self.active[user] = self.active.get(user, 0) + 1
            attempts.enter_global_queue(self, job)

    def release_slot(self, job: SimJob) -> None:
        self.active[job.spec.user] -= 1
        self.finished(job)
        self.promote(job.spec.user)

    def finished(self, job: SimJob) -> None:
        """A job reached a terminal state (or was rejected): count it, report progress (U3)."""
        self.done += 1
        if self.progress is not None:
            self.progress(self.done, len(self.jobs), self.now)

    # --- accounting (SPEC F3, F4) --------------------------------------------------------------

    def charge(self, job: SimJob, amount: float, reason: str, source_event_id: str) -> None:
        """Accounting's UsageCharged for what `source_event_id` owes, with accounting's own
        charge id (jpu.policy.charging.charge_id), so the log reads as the live one does."""
        if amount <= 0:
            return
        lab = job.spec.lab
        after = fairshare.charge(
            self.usage.get(lab, LabUsage()), amount, self.now, self.params.half_life_s
        )
        self.usage[lab] = after
        job.charged += amount
        self.log.emit(
            UsageCharged,
            self.now,
            event_id=charge_id(source_event_id),
            lab=lab,
            amount=amount,
            value_after=after.value,
            as_of=after.as_of,
            job_id=job.spec.id,
            reason=reason,
            attempt=job.attempt,
        )
        self.touch()  # D8: usage changes the order

    # --- the dispatch cycle (SPEC D3) -----------------------------------------------------------

    def _on_cycle(self, _: object) -> None:
        self._cycle_at = None
        if not self._dirty:
            return
        self._dirty = False
        # Nothing can be dispatched, reserved or demoted: the cycle would decide nothing.
        if not self.queue or (self.cluster.idle_count == 0 and self.reserving == 0):
            self.totals.cycles_skipped += 1
            return
        self.totals.cycles += 1
        self.totals.max_global_queue = max(self.totals.max_global_queue, len(self.queue))
        self._last_cycle = self.now
        snapshot = Snapshot(
            tiers=self.tiers,
            gpus=list(self.cluster.gpus),
            queue=self.queue,  # grouped by lab: the cycle merges labs, never sorts jobs (D1)
            usage=dict(self.usage),
            half_life_s=self.params.half_life_s,
            running=list(self.running.values()),
            reservation_demotion=self.params.reservation_demotion or "strict",
            reservation_demotion_margin=self.params.reservation_demotion_margin or 0.0,
            maintenance=self.maintenance,
        )
        t0 = time.perf_counter()
        result = self.policy(snapshot, self.now)
        self.policy_s += time.perf_counter() - t0
        cycles.apply(self, result)
