"""A tiny multi-cycle driver for property tests: applies CycleResults to a cluster, ends jobs,
charges usage lazily (F4) and keeps an independent ledger of every GPU-second held (F5)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from jpu.config import Tier
from jpu.policy import charge, cycle
from jpu.policy.model import (
    CycleResult,
    Gpu,
    LabUsage,
    QueuedJob,
    Reservation,
    ReservationShrink,
    RunningJob,
    Snapshot,
)

Policy = Callable[[Snapshot, float], CycleResult]  # the cycle, or a variant under test


@dataclass
class Run:
    job: QueuedJob
    node: str
    tier: str
    gpus: tuple[int, ...]
    start: float
    end: float
    reserved_uncharged: float  # TFLOP-s of its reservation, charged at the attempt end


@dataclass
class Sim:
    tiers: dict[str, Tier]
    gpus: dict[tuple[str, str, int], str]
    durations: dict[str, float]
    half_life_s: float = 3600.0
    now: float = 0.0
    queue: dict[str, QueuedJob] = field(default_factory=dict)
    running: dict[str, Run] = field(default_factory=dict)
    usage: dict[str, LabUsage] = field(default_factory=dict)
    charged: float = 0.0  # sum of every charge (TFLOP-s)
    truth: float = 0.0  # ledger: GPU-seconds actually held × tflops
    held_since: dict[tuple[str, str, int], float] = field(default_factory=dict)
    dispatched_at: dict[str, float] = field(default_factory=dict)
    results: list[tuple[Snapshot, CycleResult]] = field(default_factory=list)
    demotion: str = "strict"  # SPEC R6 mode for every cycle
    backfill: str = "off"  # SPEC R7 `reservation_backfill` for every cycle
    # TFLOP-s of reserved GPUs that left a reservation still held (R5 lost, R6 yielded): charged
    # with the attempt's end (F4), whatever happens to the rest of the reservation
    lazy: dict[str, float] = field(default_factory=dict)

    def _charge(self, lab: str, amount: float) -> None:
        u = self.usage.get(lab, LabUsage())
        self.usage[lab] = charge(u, amount, self.now, self.half_life_s)
        self.charged += amount

    def _hold(self, node: str, tier: str, gpus: tuple[int, ...], state: str) -> None:
        for i in gpus:
            key = (node, tier, i)
            assert self.gpus[key] == "free" or self.gpus[key].startswith(("reserved:", "backfill:"))
            self.gpus[key] = state
            self.held_since.setdefault(key, self.now)

    def _free(self, node: str, tier: str, gpus: tuple[int, ...]) -> None:
        for i in gpus:
            key = (node, tier, i)
            self.gpus[key] = "free"
            self.truth += (self.now - self.held_since.pop(key)) * self.tiers[tier].tflops

    def submit(self, j: QueuedJob) -> None:
        self.queue[j.job_id] = j

    def end_jobs(self) -> None:
        for jid, r in list(self.running.items()):
            if r.end <= self.now:
                del self.running[jid]
                self._free(r.node, r.tier, r.gpus)
                run = len(r.gpus) * (self.now - r.start)
                self._charge(r.job.lab, run * self.tiers[r.tier].tflops + r.reserved_uncharged)

    def snapshot(self, policy: Policy = cycle) -> CycleResult:
        gpus = [Gpu(n, t, i, s) for (n, t, i), s in sorted(self.gpus.items())]
        snap = Snapshot(
            tiers=self.tiers,
            gpus=gpus,
            queue=list(self.queue.values()),
            usage=dict(self.usage),
            half_life_s=self.half_life_s,
            reservation_demotion=self.demotion,  # type: ignore[arg-type]
            reservation_backfill=self.backfill,  # type: ignore[arg-type]
            running=[  # R7: shadow times from started_at + time_limit_s
                RunningJob(
                    job_id=jid,
                    lab=r.job.lab,
                    node=r.node,
                    tier=r.tier,
                    gpus=r.gpus,
                    started_at=r.start,
                    time_limit_s=r.job.time_limit_s,
                )
                for jid, r in self.running.items()
            ],
        )
        res = policy(snap, self.now)
        self.results.append((snap, res))
        return res

    def shrink(self, sh: ReservationShrink) -> None:
        j = self.queue[sh.job_id]
        r = j.reservation
        assert r is not None and set(sh.removed) <= set(r.gpus)
        joined = dict(zip(r.gpus, r.joined, strict=True))
        self.queue[j.job_id] = _with(
            j, Reservation(r.node, r.tier, sh.gpus, r.since, tuple(joined[g] for g in sh.gpus))
        )
        self._free(r.node, r.tier, sh.removed)
        self.lazy[j.job_id] = self.lazy.get(j.job_id, 0.0) + sh.gpu_seconds * sh.tflops

    def apply(self, res: CycleResult) -> None:
        uncharged: dict[str, float] = {}
        lent = [sh for sh in res.shrinks if sh.reason == "lent"]
        for sh in res.shrinks:  # R5/R6 first, as the log has them: then the rest
            if sh.reason != "lent":
                self.shrink(sh)
        for rel in res.releases:
            j = self.queue[rel.job_id]
            r = j.reservation
            assert r is not None
            self.queue[j.job_id] = _with(j, None)
            if rel.charge_now:
                self._charge(j.lab, rel.charge_now)
            else:
                uncharged[j.job_id] = rel.held_cost
            if rel.reason != "dispatched":
                self._free(r.node, r.tier, r.gpus)
        for s in res.starts:
            self._hold(s.node, s.tier, s.gpus, f"reserved:{s.job_id}")
            res_ = Reservation(s.node, s.tier, s.gpus, self.now, tuple(self.now for _ in s.gpus))
            self.queue[s.job_id] = _with(self.queue[s.job_id], res_)
        for g in res.grows:
            j = self.queue[g.job_id]
            r = j.reservation
            assert r is not None
            self._hold(g.node, g.tier, g.added, f"reserved:{g.job_id}")
            was = dict(zip(r.gpus, r.joined, strict=True))  # by GPU: after a shrink `gpus` is
            at = tuple(was.get(i, self.now) for i in g.gpus)  # not in the order it grew
            self.queue[g.job_id] = _with(j, Reservation(r.node, r.tier, g.gpus, r.since, at))
        for sh in lent:  # R7: after the grows (a loan may name a GPU grown this cycle)
            self.shrink(sh)
        for d in res.dispatches:
            j = self.queue.pop(d.job_id)
            for i in d.gpus:  # GPUs of its own reservation move to the job without a gap
                if self.gpus[(d.node, d.tier, i)] == f"reserved:{d.job_id}":
                    self.gpus[(d.node, d.tier, i)] = "free"
            self._hold(d.node, d.tier, d.gpus, f"job:{d.job_id}")
            end = self.now + self.durations[d.job_id]
            owed = uncharged.get(d.job_id, 0.0) + self.lazy.pop(d.job_id, 0.0)
            self.running[d.job_id] = Run(j, d.node, d.tier, d.gpus, self.now, end, owed)
            self.dispatched_at[d.job_id] = self.now

    def step(self, dt: float, policy: Policy = cycle) -> CycleResult:
        self.now += dt
        self.end_jobs()
        res = self.snapshot(policy)
        self.apply(res)
        return res

    def close(self) -> None:
        """Cancel what is left: reservations charged with the cancel, running jobs end now."""
        for j in list(self.queue.values()):
            r = j.reservation
            if r is not None:
                held = sum(self.now - t for t in r.joined)
                self._charge(j.lab, held * self.tiers[r.tier].tflops)
                self._free(r.node, r.tier, r.gpus)
        for jid, owed in self.lazy.items():  # cancelled: what left its reservation before
            self._charge(self.queue[jid].lab, owed)
        self.lazy.clear()
        for run in self.running.values():
            run.end = self.now
        self.end_jobs()


def _with(j: QueuedJob, r: Reservation | None) -> QueuedJob:
    return QueuedJob(
        job_id=j.job_id,
        lab=j.lab,
        user=j.user,
        num_gpus=j.num_gpus,
        queue_entered_at=j.queue_entered_at,
        tiers=j.tiers,
        min_vram_gb=j.min_vram_gb,
        attempt=j.attempt,
        time_limit_s=j.time_limit_s,
        reservation=r,
    )
