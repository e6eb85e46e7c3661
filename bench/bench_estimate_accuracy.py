"""Accuracy of the estimated start (SPEC U4):
`python bench/bench_estimate_accuracy.py [--workload lab|philly-sample|philly] [--trace CSV]`.

Inside one simulator run (the services' policy core), at every whole hour every waiting job's
start is estimated from the simulator's own state (its fold:
`jpu.explain.estimate.present` → `forward`), and at submission for a sample of jobs; at the
end each estimate is compared with the job's actual start. Relative error = |estimate − actual| /
max(actual − t, 60 s), t = when it was made. A second line per row: the same over the samples whose
job waited ≥ 60 s (where most jobs start at once, both estimates are exact for them and the p50 of
all samples is 0.000 for both), the share of samples where ours is closer to the actual start than
Slurm-style's (or farther, by more than 1 s), and our median signed error (< 0: early). Settings of
what the estimate knows of durations:
  exact      time limit = the job's real run time
  2x         time limit = 2 × the run time (what users really write); the estimate scales a
             limit by the user's recent run time / limit (jpu.explain.estimate.RunTimes)
  2x-limits  the same, the estimate from the limits alone
  loose      time limit = the run time × a factor per job, lognormal with median 2 (σ 0.6 of
             its log), clipped to [1, 10], seeded: users differ, and so does each of their jobs
             (with `2x` every run/limit ratio is exactly 0.5, a best case for the scaling)
  loose-limits  the same, the estimate from the limits alone
  predicted  no limits: the median of the user's (else the lab's) completed runs
             (jpu.explain.estimate)
Beside it, in the same run on the same states, a Slurm-style estimate: a backfill plan by time
limits (no limit: 24 h, a partition's DefaultTime) in the current priority order, fair-share
frozen (what `squeue --start` gives). Coverage = share of samples with an estimate (ours:
not `unknown`); errors are over the samples where both have one.

Workloads: `lab` = the default 8-GPU cluster (SPEC §1.1) with a synthetic lab workload (4 labs,
12 users, a week, ~90 % offered load); `philly-sample` = data/philly-sample.csv on
config/philly-cluster.yaml; `philly` = weeks 6–7 of the whole trace (`--trace`, `make
philly-trace`) on 640 GPUs (config/philly-cluster.yaml's tiers, 1.25 × its nodes).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from bisect import bisect_left
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from jpu.config import DEFAULT_PATH, Cluster, Node, load_cluster
from jpu.domain.states import PLACED, QUEUED, queued_job
from jpu.events import Event, JobPromoted
from jpu.explain.estimate import RunTimes, present
from jpu.policy.fairshare import decayed
from jpu.policy.slurm_like import limit_of
from jpu.sim.engine import Simulator
from jpu.sim.eventlog import EventLog
from jpu.sim.forward import EstimateParams, Present, forward, own_fold
from jpu.sim.params import SimParams
from jpu.sim.philly import ConvertOptions, convert_file
from jpu.sim.state import ARRIVAL
from jpu.sim.workload import WorkloadJob

ROOT = Path(__file__).resolve().parent.parent
H = 3600.0
MIN_WAIT_S = 60.0


# --- workloads -------------------------------------------------------------------------------


def lab_workload(seed: int = 5, days: float = 7.0) -> tuple[Cluster, list[WorkloadJob]]:
    cluster = load_cluster(DEFAULT_PATH)
    rnd = random.Random(seed)
    labs = {"BCG": 4, "KDG": 3, "OSL": 3, "NLP": 2}  # users per lab
    users = [(f"{lab.lower()}-u{i}", lab) for lab, n in labs.items() for i in range(n)]
    # lab habits: (typical run time s, share of 2-GPU jobs)
    habit = {"BCG": (2 * H, 0.5), "KDG": (40 * 60, 0.2), "OSL": (4 * H, 0.3), "NLP": (H, 0.6)}
    jobs, t, i = [], 0.0, 0
    mean_gap = 1100.0  # ~90 % of 8 GPUs offered
    while t < days * 86400:
        t += rnd.expovariate(1 / mean_gap)
        user, lab = rnd.choice(users)
        typical, two = habit[lab]
        duration = max(60.0, rnd.lognormvariate(math.log(typical), 0.6))
        jobs.append(
            WorkloadJob(
                id=f"j{i:05d}",
                lab=lab,
                user=user,
                submit_s=round(t, 3),
                num_gpus=2 if rnd.random() < two else 1,
                duration_s=round(duration, 1),
            )
        )
        i += 1
    return cluster, jobs


def philly_cluster(scale_nodes: float) -> Cluster:
    base = load_cluster(ROOT / "config" / "philly-cluster.yaml")
    by_tier: dict[str, int] = {}
    for n in base.nodes:
        for tier in n.gpus:
            by_tier[tier] = by_tier.get(tier, 0) + 1
    nodes = [
        Node(name=f"{tier}-{k + 1:02d}", gpus={tier: 8})
        for tier, count in by_tier.items()
        for k in range(round(count * scale_nodes))
    ]
    return msgspec.structs.replace(base, nodes=nodes)


def philly_workload(trace: Path, weeks: tuple[int, int] | None) -> list[WorkloadJob]:
    opts = ConvertOptions()
    if weeks is not None:
        first = datetime(2017, 9, 4)  # the trace's first submission day (data/README.md)
        start = first + timedelta(weeks=weeks[0] - 1)
        opts = ConvertOptions(start=start, days=7.0 * (weeks[1] - weeks[0] + 1))
    jobs, _ = convert_file(trace, opts)
    return jobs


LOOSE_SEED = 14
LOOSE_SIGMA = 0.6  # of log(limit / run time): half the jobs 1.3-3x, a tenth > 4.3x, 12 % at 1x


def loose_factor(rnd: random.Random) -> float:
    """A limit as users write it: the run time × lognormal(median 2), clipped to [1, 10]."""
    return min(10.0, max(1.0, rnd.lognormvariate(math.log(2.0), LOOSE_SIGMA)))


def with_limits(jobs: list[WorkloadJob], setting: str) -> list[WorkloadJob]:
    if setting == "loose":  # one factor per job, seeded: the same limits in every run
        rnd = random.Random(LOOSE_SEED)
        factors = [loose_factor(rnd) for _ in jobs]
    else:
        factor = {"exact": 1.0, "2x": 2.0}.get(setting)
        if factor is None:
            return jobs
        factors = [factor] * len(jobs)
    return [
        msgspec.structs.replace(j, time_limit_s=max(1.0, math.ceil(j.duration_s * f)))
        for j, f in zip(jobs, factors, strict=True)
    ]


# --- the Slurm-style estimate: a backfill plan by time limits, fair-share frozen -------------


def slurm_plan(p: Present) -> dict[str, float]:
    """squeue --start's idea: in priority order (D1 at `now`, usage frozen) each job reserves the
    earliest window where some fit placement has its GPUs free for its whole time limit, given
    the running jobs' limits and the windows planned before it."""
    now, tiers, fold = p.now, p.tiers, own_fold(p)
    cap: dict[tuple[str, str], int] = {}
    for (node, tier), count in fold.inventory.items():
        up = sum(1 for i in range(count) if (node, tier, i) not in fold.down)
        if up:
            cap[(node, tier)] = up
    ends: dict[tuple[str, str], list[tuple[float, int]]] = {}
    busy: dict[tuple[str, str], int] = {}
    for r in fold.jobs.values():
        if r.placement is None or r.state not in PLACED:
            continue
        node, tier, held = r.placement
        key = (node, tier)
        busy[key] = busy.get(key, 0) + len(held)
        end = max(now, (r.dispatched_at or now) + limit_of(r.time_limit_s))
        ends.setdefault(key, []).append((end, len(held)))
    # profile per placement: breakpoint times and the free GPUs from each until the next
    prof: dict[tuple[str, str], tuple[list[float], list[int]]] = {}
    for key, c in cap.items():
        times, free = [now], [c - busy.get(key, 0)]
        for end, n in sorted(ends.get(key, [])):
            if end == times[-1]:
                free[-1] += n
            else:
                times.append(end)
                free.append(free[-1] + n)
        prof[key] = (times, free)
    usage = {lab: decayed(u, now, p.half_life_s) for lab, u in fold.usage.items()}
    order: list[tuple[float, int, float, str, Any]] = []
    for q in fold.jobs.values():
        if q.state in QUEUED:
            rec = queued_job(q)
            order.append((usage.get(rec.lab, 0.0), 0, rec.queue_entered_at, rec.job_id, q))
    for pq in fold.personal.values():
        for k, i in enumerate(pq):
            j = fold.jobs[i]
            order.append((usage.get(j.lab, 0.0), 1, float(k), j.job_id, j))
    order.sort(key=lambda o: o[:4])
    out: dict[str, float] = {}
    for _, _, _, job_id, j in order:
        d = limit_of(j.time_limit_s)
        best: tuple[float, int, str, str] | None = None
        for key, (times, free) in prof.items():
            t = tiers.get(key[1])
            if t is None or not t.active or j.num_gpus > min(cap[key], t.max_gpus):
                continue
            if (j.tiers is not None and t.name not in j.tiers) or (
                j.min_vram_gb is not None and t.vram_gb < j.min_vram_gb
            ):
                continue
            s = _earliest(times, free, j.num_gpus, d)
            if s is not None and (best is None or (s, -t.sort_order) < best[:2]):
                best = (s, -t.sort_order, key[0], key[1])
        if best is None:
            continue
        out[job_id] = best[0]
        _take(*prof[(best[2], best[3])], best[0], d, j.num_gpus)
    return out


def _earliest(times: list[float], free: list[int], n: int, d: float) -> float | None:
    i, m = 0, len(times)
    while i < m:
        if free[i] < n:
            i += 1
            continue
        k, end = i, times[i] + d
        while k < m and times[k] < end and free[k] >= n:
            k += 1
        if k == m or times[k] >= end:
            return times[i]
        i = k + 1
    return None


def _take(times: list[float], free: list[int], s: float, d: float, n: int) -> None:
    for t in (s, s + d):
        i = _index(times, t)
        if i == len(times) or times[i] != t:
            times.insert(i, t)
            free.insert(i, free[i - 1] if i > 0 else 0)
    lo, hi = _index(times, s), _index(times, s + d)
    for k in range(lo, hi):
        free[k] -= n


def _index(times: list[float], t: float) -> int:
    return bisect_left(times, t)


# --- the probed simulation --------------------------------------------------------------------


class Sample(msgspec.Struct, array_like=True):
    job_id: str
    at: float
    ours: float | None
    basis: str
    slurm: float | None
    kind: str  # "submit" | "hourly"


class ProbedSim(Simulator):
    """The simulator, estimating every waiting job's start each hour and at sampled arrivals."""

    def __init__(
        self, cluster: Cluster, jobs: list[WorkloadJob], setting: str, every: int, scale: bool
    ):
        params = SimParams(backfill=False)
        super().__init__(cluster, jobs, params, EventLog(None))
        self.setting = setting
        self.every = every
        self.arrivals = 0
        self.runtimes = RunTimes(self.state.runs, scale_limits=scale)
        self.samples: list[Sample] = []
        self.estimate_cpu: list[float] = []
        self.slurm_cpu: list[float] = []
        self.params_est = EstimateParams()
        self.entered: dict[str, float] = {}  # job id -> queue_entered_at (its promotion)

    def folded(self, event: Event) -> None:
        """What the bench notes as it follows the log: promotions (run times are the fold's)."""
        if isinstance(event, JobPromoted):
            self.entered[event.job_id] = event.queue_entered_at

    def handlers(self) -> dict[int, Callable[[Simulator, Any], None]]:
        h = super().handlers()
        h[ARRIVAL] = ProbedSim._on_arrival_probed
        return h

    @staticmethod
    def _on_arrival_probed(sim: Simulator, job: WorkloadJob) -> None:
        assert isinstance(sim, ProbedSim)
        sim.on_arrival_probed(job)

    def on_arrival_probed(self, job: WorkloadJob) -> None:
        self._on_arrival(job)
        self.arrivals += 1
        if self.arrivals % self.every == 0 and job.id in self.state.jobs:
            self.probe("submit", only=job.id)

    def probe(self, kind: str, only: str | None = None) -> None:
        p = present(self.state, self.config, self.now, self.runtimes)
        if not any(j.state in QUEUED or j.state == "PERSONAL_QUEUE_WAIT" for j in p.jobs):
            return
        c0 = time.process_time()
        plan = slurm_plan(p)  # before the forward plays (changes) the Present's jobs
        c1 = time.process_time()
        res = forward(p, self.params_est)
        c2 = time.process_time()
        self.slurm_cpu.append(c1 - c0)
        self.estimate_cpu.append(c2 - c1)
        for job_id, e in res.estimates.items():
            if only is None or job_id == only:
                self.samples.append(Sample(job_id, p.now, e.start, e.basis, plan.get(job_id), kind))

    def run_probed(self) -> None:
        self.begin()
        handlers = self.handlers()
        total = len(self.specs)
        next_probe = H
        while self._heap and self.done < total:
            if self.next_time() >= next_probe:
                self.now = next_probe
                self.probe("hourly")
                next_probe += H
                if next_probe % (24 * H) == 0:  # U3: progress, once a virtual day
                    print(
                        f"  {self.setting}: day {next_probe / 86400:.0f}, {self.done}/{total}"
                        f" jobs done, {len(self.samples)} samples, wall {time.perf_counter():.0f}",
                        file=sys.stderr,
                        flush=True,
                    )
                continue
            self.step(handlers)


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def evaluate(sim: ProbedSim) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("submit", "hourly"):
        ours, slurm, covered, n = [], [], 0, 0
        w_ours, w_slurm = [], []  # the samples whose job waited at least MIN_WAIT_S
        closer = farther = 0  # ours closer to the actual start than Slurm-style's (by > 1 s)
        signed: list[float] = []  # ours: (estimate - actual) / wait; < 0: early
        basis: dict[str, int] = {}
        for s in sim.samples:
            if s.kind != kind:
                continue
            actual = sim.outcomes[s.job_id].first_dispatch_at
            if actual is None:
                continue
            n += 1
            basis[s.basis] = basis.get(s.basis, 0) + 1
            if s.ours is None:
                continue
            covered += 1
            if s.slurm is None:
                continue
            wait = max(actual - s.at, MIN_WAIT_S)
            ours.append(abs(s.ours - actual) / wait)
            slurm.append(abs(s.slurm - actual) / wait)
            signed.append((s.ours - actual) / wait)
            d = abs(s.slurm - actual) - abs(s.ours - actual)
            closer, farther = closer + (d > 1.0), farther + (d < -1.0)
            if actual - s.at >= MIN_WAIT_S:
                w_ours.append(ours[-1])
                w_slurm.append(slurm[-1])
        out[kind] = {
            "samples": n,
            "coverage": covered / n if n else float("nan"),
            "basis": basis,
            "ours_p50": pct(ours, 0.5),
            "ours_p90": pct(ours, 0.9),
            "slurm_p50": pct(slurm, 0.5),
            "slurm_p90": pct(slurm, 0.9),
            "compared": len(ours),
            "waited": len(w_ours),
            "waited_ours_p50": pct(w_ours, 0.5),
            "waited_ours_p90": pct(w_ours, 0.9),
            "waited_slurm_p50": pct(w_slurm, 0.5),
            "waited_slurm_p90": pct(w_slurm, 0.9),
            "closer": closer / len(ours) if ours else float("nan"),
            "farther": farther / len(ours) if ours else float("nan"),
            "signed_p50": pct(signed, 0.5),
        }
    out["estimate_cpu_s_median"] = statistics.median(sim.estimate_cpu) if sim.estimate_cpu else 0
    out["estimate_cpu_s_max"] = max(sim.estimate_cpu, default=0.0)
    out["slurm_cpu_s_median"] = statistics.median(sim.slurm_cpu) if sim.slurm_cpu else 0
    waits = [
        o.first_dispatch_at - sim.entered.get(jid, sim.specs[jid].submit_s)
        for jid, o in sim.outcomes.items()
        if o.first_dispatch_at is not None
    ]
    out["mean_wait_h"] = statistics.mean(waits) / H if waits else 0.0
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", choices=("lab", "philly-sample", "philly"), default="lab")
    ap.add_argument("--trace", type=Path, default=ROOT / "data" / "philly.csv")
    ap.add_argument(
        "--settings",
        nargs="*",
        default=["exact", "2x", "2x-limits", "loose", "loose-limits", "predicted"],
    )
    ap.add_argument("--nodes-scale", type=float, default=1.25, help="philly: × the yaml's nodes")
    ap.add_argument("--weeks", type=int, nargs=2, default=(6, 7), help="philly: first, last week")
    ap.add_argument("--growth", type=float, default=EstimateParams().growth)
    ap.add_argument("--submit-samples", type=int, default=400, help="arrivals probed (about)")
    args = ap.parse_args()
    if args.workload == "lab":
        cluster, jobs = lab_workload()
    elif args.workload == "philly-sample":
        cluster = load_cluster(ROOT / "config" / "philly-cluster.yaml")
        jobs = philly_workload(ROOT / "data" / "philly-sample.csv", None)
    else:
        if not args.trace.exists():
            print(f"{args.trace}: missing (make philly-trace)", file=sys.stderr)
            return 2
        weeks = (args.weeks[0], args.weeks[1])
        cluster, jobs = philly_cluster(args.nodes_scale), philly_workload(args.trace, weeks)
    gpus = sum(c for n in cluster.nodes for c in n.gpus.values())
    print(f"workload {args.workload}: {len(jobs)} jobs on {gpus} GPUs", flush=True)
    every = max(1, len(jobs) // max(1, args.submit_samples))
    print(
        f"{'setting':>9} {'kind':>6} | {'samples':>7} {'cover':>5} | {'ours p50':>8} {'p90':>6} |"
        f" {'slurm p50':>9} {'p90':>6} | basis (limits/predicted/unknown)",
        flush=True,
    )
    for setting in args.settings:
        t0 = time.perf_counter()
        # 2x-limits: the same workload, the estimate from limits only (no scaling by history)
        limits = with_limits(jobs, setting.removesuffix("-limits"))
        sim = ProbedSim(cluster, limits, setting, every, not setting.endswith("-limits"))
        sim.params_est = EstimateParams(growth=args.growth)
        sim.run_probed()
        r = evaluate(sim)
        for kind in ("submit", "hourly"):
            k = r[kind]
            b = k["basis"]
            print(
                f"{setting:>9} {kind:>6} | {k['samples']:>7} {k['coverage']:>5.2f} |"
                f" {k['ours_p50']:>8.3f} {k['ours_p90']:>6.2f} |"
                f" {k['slurm_p50']:>9.3f} {k['slurm_p90']:>6.2f} |"
                f" {b.get('limits', 0)}/{b.get('predicted', 0)}/{b.get('unknown', 0)}",
                flush=True,
            )
            print(
                f"{'':>9} {kind:>6} | waited >= {MIN_WAIT_S:.0f} s: {k['waited']:>6}"
                f" ours {k['waited_ours_p50']:.3f} / {k['waited_ours_p90']:.2f},"
                f" slurm {k['waited_slurm_p50']:.3f} / {k['waited_slurm_p90']:.2f} |"
                f" ours closer {k['closer']:.2f}, farther {k['farther']:.2f} |"
                f" ours signed p50 {k['signed_p50']:+.3f}",
                flush=True,
            )
        print(
            f"{setting:>9}: mean wait {r['mean_wait_h']:.2f} h; estimate CPU median"
            f" {r['estimate_cpu_s_median']:.3f} s (max {r['estimate_cpu_s_max']:.2f});"
            f" slurm plan {r['slurm_cpu_s_median']:.3f} s; wall {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
