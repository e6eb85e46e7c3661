"""The run's summary (SPEC §10): lab usage, per-job wait and JCT, wait by width, utilization,
Jain's fairness, makespan."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from jpu.policy import fairshare
from jpu.policy.model import LabUsage
from jpu.sim.world import World


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


def _jobs(sim: World) -> dict[str, dict[str, Any]]:
    """Each job's final state and attempt from the fold (the JobView it left the hot state
    with, or the one still in it), with the times and charges the summary recorded."""
    out = {}
    for jid, spec in sim.specs.items():
        o = sim.outcomes[jid]
        live = sim.state.jobs.get(jid)
        state = live.state if live is not None else o.final_state
        attempt = live.attempt if live is not None else o.final_attempt
        sub = spec.submit_s
        out[jid] = {
            "state": state,
            "attempts": attempt if o.first_dispatch_at is not None else 0,
            "wait_s": None if o.first_dispatch_at is None else o.first_dispatch_at - sub,
            "jct_s": None if o.ended_at is None else o.ended_at - sub,
            "tier": o.tier,
            "lab": spec.lab,
            "num_gpus": spec.num_gpus,
            "charged_tflop_s": o.charged,
        }
        if o.reason:
            out[jid]["reason"] = o.reason
    return out


def _labs(sim: World, end: float) -> dict[str, dict[str, float]]:
    usage = sim.state.usage
    names = sorted({s.lab for s in sim.specs.values()} | set(usage))
    charged: dict[str, float] = defaultdict(float)
    for jid, o in sim.outcomes.items():
        charged[sim.specs[jid].lab] += o.charged
    out = {}
    for lab in names:
        u = usage.get(lab, LabUsage())
        out[lab] = {
            "usage_tflop_s": fairshare.decayed(u, end, sim.params.half_life_s),
            "value": u.value,
            "as_of": u.as_of,
            "charged_tflop_s": charged[lab],
            "initial_tflop_s": sim.initial_usage.get(lab, 0.0),
        }
    return out


def build(sim: World, end: float) -> dict[str, Any]:
    jobs = _jobs(sim)
    by_width: dict[int, list[float]] = defaultdict(list)
    for j in jobs.values():
        if j["wait_s"] is not None:
            by_width[j["num_gpus"]].append(j["wait_s"])
    first = min((s.submit_s for s in sim.specs.values()), default=0.0)
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
