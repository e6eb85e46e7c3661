"""The run's summary (SPEC §10): lab usage, per-job wait and JCT, wait by width, utilization,
Jain's fairness, makespan."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from jpu.policy import fairshare
from jpu.policy.model import LabUsage

if TYPE_CHECKING:
    from jpu.sim.engine import Simulator


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    k = max(0, math.ceil(p / 100 * len(sorted_values)) - 1)
    return sorted_values[k]


def stats(values: Iterable[float]) -> dict[str, float | int]:
    v = sorted(values)
    if not v:
        return {"count": 0}
    return {
        "count": len(v),
        "mean": sum(v) / len(v),
        "p50": percentile(v, 50),
        "p99": percentile(v, 99),
        "max": v[-1],
    }


def jain(values: Sequence[float]) -> float:
    """Jain's fairness index (Σx)² / (n·Σx²): 1 = all equal, 1/n = one takes all."""
    sq = sum(x * x for x in values)
    return (sum(values) ** 2) / (len(values) * sq) if sq > 0 else 1.0


def _jobs(sim: Simulator) -> dict[str, dict[str, Any]]:
    out = {}
    for jid, j in sim.jobs.items():
        sub = j.spec.submit_s
        out[jid] = {
            "state": j.state,
            "attempts": j.attempt if j.first_dispatch_at is not None else 0,
            "wait_s": None if j.first_dispatch_at is None else j.first_dispatch_at - sub,
            "jct_s": None if j.end_at is None else j.end_at - sub,
            "tier": j.tier,
            "lab": j.spec.lab,
            "num_gpus": j.spec.num_gpus,
            "charged_tflop_s": j.charged,
        }
        if j.end_reason:
            out[jid]["reason"] = j.end_reason
    return out


def _labs(sim: Simulator, end: float) -> dict[str, dict[str, float]]:
    names = sorted({j.spec.lab for j in sim.jobs.values()} | set(sim.usage))
    charged: dict[str, float] = defaultdict(float)
    for j in sim.jobs.values():
        charged[j.spec.lab] += j.charged
    out = {}
    for lab in names:
        u = sim.usage.get(lab, LabUsage())
        out[lab] = {
            "usage_tflop_s": fairshare.decayed(u, end, sim.params.half_life_s),
            "value": u.value,
            "as_of": u.as_of,
            "charged_tflop_s": charged[lab],
            "initial_tflop_s": sim.initial_usage.get(lab, 0.0),
        }
    return out


def build(sim: Simulator, end: float) -> dict[str, Any]:
    jobs = _jobs(sim)
    by_width: dict[int, list[float]] = defaultdict(list)
    for j in jobs.values():
        if j["wait_s"] is not None:
            by_width[j["num_gpus"]].append(j["wait_s"])
    first = min((j.spec.submit_s for j in sim.jobs.values()), default=0.0)
    makespan = max(0.0, end - first)
    gpu_time = sim.cluster.capacity * makespan
    t = sim.totals
    labs = _labs(sim, end)
    multi = [j["wait_s"] for j in jobs.values() if j["num_gpus"] >= 2 and j["wait_s"] is not None]
    return {
        "policy": sim.params.policy,
        "parameters": {
            k: v for k, v in msgspec.structs.asdict(sim.params).items() if k != "progress"
        },
        "labs": labs,
        "jobs": jobs,
        "job_states": dict(sorted(Counter(j["state"] for j in jobs.values()).items())),
        "wait_s_by_num_gpus": {str(n): stats(v) for n, v in sorted(by_width.items())},
        "max_wait_multi_gpu_s": max(multi, default=0.0),
        "gpu_utilization": {
            "research": t.run_gpu_s / gpu_time if gpu_time else 0.0,
            "reserved": t.reserved_gpu_s / gpu_time if gpu_time else 0.0,
            "with_backfill": (t.run_gpu_s + t.backfill_gpu_s) / gpu_time if gpu_time else 0.0,
        },
        "gpu_seconds": {
            "run": t.run_gpu_s,
            "reserved": t.reserved_gpu_s,
            "backfill": t.backfill_gpu_s,
            "capacity_gpus": sim.cluster.capacity,
        },
        "jain_fairness": jain([v["usage_tflop_s"] for v in labs.values()]),
        "jain_fairness_charged": jain([v["charged_tflop_s"] for v in labs.values()]),
        "makespan_s": makespan,
        "end_time_s": end,
        "counts": {
            "events": sim.log.count,
            "cycles": t.cycles,
            "cycles_skipped": t.cycles_skipped,
            "demotions": t.demotions,
            "oom_retries": t.oom_retries,
            "backfills_started": t.backfills_started,
            "backfills_preempted": t.backfills_preempted,
            "max_global_queue": t.max_global_queue,
        },
    }
