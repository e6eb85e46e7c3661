"""Reservations on real traces (SPEC R3/R6): each R6 demotion mode against slurm-like
and FIFO, from the simulator, on the same workload per (cluster shape, trace window).

    python bench/bench_policy.py                  # short: the bundled sample + one small run
    python bench/bench_policy.py --full --trace /path/to/philly.csv   # 3 windows x 2 shapes

Shapes: `philly640` = 48 x 8 rtx4090 + 32 x 8 rtx3080ti, one Philly virtual cluster = one lab,
5 users each, 64 slots per user (`phillyN`: N GPUs, the same 3:2 split of 8-GPU nodes);
`small` = the default cluster scaled to 8 nodes x 2 GPUs with a synthetic workload of 1-2-GPU
jobs (6 labs of very different demand, seeded per window).
Per policy it prints the issue's table — 8-GPU p99/max wait, 2-GPU p99, 1-GPU mean/p99,
lightest/heaviest third of labs (by GPU demand) mean wait, reservations started / ended by R3
demotion — plus partial yields (R6 `yield`), GPU-hours held by demoted reservations, research
utilization, Jain's index of lab usage and Themis-style finish-time fairness (per lab mean
JCT / run time; the worst lab's).
Everything is read from the simulator's summary and event log (no cost formula here).
"""

from __future__ import annotations

import argparse
import io
import json
import math
import random
import sys
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from jpu.config import DEMOTION_MODES, Cluster
from jpu.events import ReservationReleased, ReservationShrunk, ReservationStarted, decode
from jpu.sim.params import SimParams
from jpu.sim.philly import ConvertOptions, convert_file
from jpu.sim.run import simulate
from jpu.sim.summary import jain, percentile
from jpu.sim.workload import WorkloadJob

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "data" / "philly-sample.csv"
# weeks counted from the trace's first Monday (2017-09-04), 0-based: the weeks 6-7 first
FULL_WINDOWS = ["2017-10-16:14", "2017-10-02:14", "2017-10-09:14"]
SHORT_WINDOWS = ["all"]
H = 3600.0
TIERS = [
    {"name": "rtx4090", "model": "NVIDIA RTX 4090", "vram_gb": 24, "tflops": 82.6,
     "sort_order": 20, "max_gpus": 8, "partition": "rtx4090", "cpus_per_gpu": 8,
     "mem_gb_per_gpu": 32},
    {"name": "rtx3080ti", "model": "NVIDIA RTX 3080 Ti", "vram_gb": 12, "tflops": 34.1,
     "sort_order": 10, "max_gpus": 8, "partition": "rtx3080ti", "cpus_per_gpu": 6,
     "mem_gb_per_gpu": 24},
]  # fmt: skip


def policies(modes: Iterable[str]) -> list[tuple[str, SimParams]]:
    out = []
    for m in modes:  # "mode" or "mode:margin" (hysteresis, damped), "+limit": SPEC R7
        spec, _, backfill = m.partition("+")
        mode, _, margin = spec.partition(":")
        params = SimParams(
            policy="jpu",
            reservation_demotion=mode,  # type: ignore[arg-type]
            reservation_demotion_margin=float(margin) if margin else None,
            reservation_backfill=backfill or None,  # type: ignore[arg-type]
        )
        out.append((f"jpu/{m}", params))
    out += [("slurm-like", SimParams(policy="slurm-like")), ("fifo", SimParams(policy="fifo"))]
    return out


def _cluster(nodes: list[tuple[str, str, int]], labs: dict[str, int], slots: int,
             max_gpus: int) -> Cluster:  # fmt: skip
    raw = {
        "tiers": [dict(t, max_gpus=max_gpus) for t in TIERS],
        "nodes": [{"name": n, "gpus": {t: k}} for n, t, k in nodes],
        "labs": [
            {"name": lab, "users": [{"name": f"{lab}-u{i}", "max_active_jobs": slots}
                                    for i in range(users)]}
            for lab, users in labs.items()
        ],
    }  # fmt: skip
    return msgspec.convert(raw, Cluster)


def philly_case(
    trace: Path,
    window: str,
    gpus: int = 640,
    limits: tuple[float, float] | None = None,
    limits_seed: int = 0,
) -> tuple[Cluster, list[WorkloadJob]]:
    """The issue's setting: 640 GPUs, lab = virtual cluster, 5 users x 64 slots. `limits`:
    user-style time limits (jpu.sim.philly.user_limit), SPEC R7."""
    start, days = (None, None) if window == "all" else window.split(":")
    opts = ConvertOptions(
        users_per_lab=5,
        start=datetime.fromisoformat(start) if start else None,
        days=float(days) if days else None,
        oversize="drop",
        limits=limits,
        limits_seed=limits_seed,
    )
    jobs, _ = convert_file(trace, opts)
    n = gpus // 8
    nodes = [(f"a{i:02d}", "rtx4090", 8) for i in range(n * 3 // 5)]
    nodes += [(f"b{i:02d}", "rtx3080ti", 8) for i in range(n - n * 3 // 5)]
    return _cluster(nodes, dict.fromkeys(sorted({j.lab for j in jobs}), 5), 64, 8), jobs


def small_case(seed: int, n_jobs: int = 3000) -> tuple[Cluster, list[WorkloadJob]]:
    """8 nodes x 2 GPUs, 1-2-GPU jobs, 6 labs with demand weights 1..32, offered load ~0.95."""
    rnd = random.Random(seed)
    nodes = [(f"gpu-4090x2-{i:02d}", "rtx4090", 2) for i in range(4)]
    nodes += [(f"gpu-3080tix2-{i:02d}", "rtx3080ti", 2) for i in range(4)]
    weights = {f"lab{i}": 2.0**i for i in range(6)}
    labs, w = list(weights), list(weights.values())
    jobs, t = [], 0.0
    mean_gpu_s = 1.2 * 1800 * 1.6487  # E[num_gpus] x E[lognormal(ln 1800, 1)]
    rate = 0.95 * 16 / mean_gpu_s
    for k in range(n_jobs):
        t += rnd.expovariate(rate)
        lab = rnd.choices(labs, w)[0]
        jobs.append(
            WorkloadJob(
                id=f"s{k:05d}",
                lab=lab,
                user=f"{lab}-u{rnd.randrange(2)}",
                submit_s=round(t, 1),
                num_gpus=2 if rnd.random() < 0.2 else 1,
                duration_s=round(min(8 * H, rnd.lognormvariate(7.4955, 1.0)), 1),
            )
        )
    return _cluster(nodes, dict.fromkeys(labs, 2), 8, 2), jobs


def _wait(values: list[float], p: float | None = None) -> float:
    """Mean (p=None) or nearest-rank percentile, as the simulator's summary computes them."""
    if not values:
        return float("nan")
    if p is None:
        return sum(values) / len(values)
    return percentile(sorted(values), p)


def measure(cluster: Cluster, jobs: list[WorkloadJob], params: SimParams) -> dict[str, Any]:
    buf = io.BytesIO()
    t0 = time.perf_counter()
    s = simulate(cluster, jobs, params, buf)
    wall = time.perf_counter() - t0
    started = demoted = yields = yielded = loans = lent = 0
    demoted_gpu_s = 0.0
    first_reserved: dict[str, float] = {}  # job -> when it first reserved (rank 1, R1)
    for line in buf.getvalue().splitlines():
        if b"Reservation" not in line:
            continue
        e = decode(line)
        if isinstance(e, ReservationStarted):
            started += 1
            first_reserved.setdefault(e.job_id, e.ts)
        elif isinstance(e, ReservationReleased) and e.reason == "demoted":
            demoted += 1
            demoted_gpu_s += e.gpu_seconds
        elif isinstance(e, ReservationShrunk) and e.reason == "yielded":  # R6 yield
            yields += 1
            yielded += len(e.removed)
        elif isinstance(e, ReservationShrunk) and e.reason == "lent":  # R7
            loans += 1
            lent += len(e.removed)
    spec = {j.id: j for j in jobs}
    demand: dict[str, float] = defaultdict(float)
    for j in jobs:
        demand[j.lab] += j.num_gpus * j.duration_s
    by_lab = sorted(demand, key=demand.__getitem__)
    third = max(1, len(by_lab) // 3)
    light, heavy = set(by_lab[:third]), set(by_lab[-third:])
    waits: dict[str, list[float]] = defaultdict(list)
    slowdown: dict[str, list[float]] = defaultdict(list)
    for jid, r in s["jobs"].items():
        if r["wait_s"] is None:
            continue
        w = r["wait_s"]
        waits[f"g{r['num_gpus']}"].append(w)
        waits["light" if r["lab"] in light else "heavy" if r["lab"] in heavy else "mid"].append(w)
        if r["jct_s"] is not None:
            slowdown[r["lab"]].append(r["jct_s"] / max(1.0, spec[jid].duration_s))
    rho = {lab: sum(v) / len(v) for lab, v in slowdown.items() if v}
    # the 8-GPU tail (wait >= p99): how much of it passed before the job first was rank 1
    p99 = _wait(waits["g8"], 99) if waits["g8"] else math.inf
    tail = [
        (jid, r["wait_s"])
        for jid, r in s["jobs"].items()
        if r["num_gpus"] == 8 and r["wait_s"] is not None and r["wait_s"] >= p99 > 0
    ]
    before = [
        min(w, first_reserved.get(jid, spec[jid].submit_s + w) - spec[jid].submit_s) / w
        for jid, w in tail
    ]
    return {
        "wall_s": wall,
        "g8_p99_h": _wait(waits["g8"], 99) / H,
        "g8_max_h": max(waits["g8"], default=float("nan")) / H,
        "g2_p99_h": _wait(waits["g2"], 99) / H,
        "g1_mean_h": _wait(waits["g1"]) / H,
        "g1_p99_h": _wait(waits["g1"], 99) / H,
        "light_mean_h": _wait(waits["light"]) / H,
        "heavy_mean_h": _wait(waits["heavy"]) / H,
        "reservations": started,
        "demoted": demoted,
        "demoted_gpu_h": demoted_gpu_s / H,
        "yields": yields,
        "yielded_gpus": yielded,
        "loans": loans,
        "lent_gpus": lent,
        "research_util": s["gpu_utilization"]["research"],
        "jain": s["jain_fairness"],
        "ftf_max": max(rho.values(), default=float("nan")),
        "ftf_jain": jain(list(rho.values())),
        # jobs that never reserved count 100 %: meaningful for jpu only
        "tail_before_rank1": sum(before) / len(before) if before and started else float("nan"),
        "reserved_gpu_h": s["gpu_seconds"]["reserved"] / H,
    }


ROWS: list[tuple[str, Any]] = [
    ("8-GPU jobs: p99 / max wait, h", lambda m: f"{_h(m['g8_p99_h'])} / {_h(m['g8_max_h'])}"),
    ("2-GPU jobs: p99 wait, h", lambda m: f"{m['g2_p99_h']:.3f}"),
    ("1-GPU jobs: mean / p99 wait, h", lambda m: f"{m['g1_mean_h']:.3f} / {m['g1_p99_h']:.2f}"),
    ("lightest third of labs: mean wait, h", lambda m: f"{m['light_mean_h']:.3f}"),
    ("heaviest third of labs: mean wait, h", lambda m: f"{m['heavy_mean_h']:.3f}"),
    ("reservations started / ended by R3", lambda m: _res(m)),
    ("R3 demotions per reservation", lambda m: _ratio(m["demoted"], m["reservations"])),
    ("GPU-h held by demoted reservations", lambda m: f"{m['demoted_gpu_h']:,.1f}"),
    ("partial yields / GPUs given back (R6 yield)",
     lambda m: f"{m['yields']:,} / {m['yielded_gpus']:,}" if m["yields"] else "-"),
    ("loans / GPUs lent (R7 limit)",
     lambda m: f"{m['loans']:,} / {m['lent_gpus']:,}" if m.get("loans") else "-"),
    ("GPU-h held by all reservations", lambda m: f"{m['reserved_gpu_h']:,.1f}"),
    ("8-GPU tail (>= p99): wait before rank 1", lambda m: _pct(m["tail_before_rank1"])),
    ("research utilization", lambda m: f"{m['research_util']:.3f}"),
    ("Jain's index (lab usage)", lambda m: f"{m['jain']:.3f}"),
    ("finish-time fairness: worst lab / Jain",
     lambda m: f"{m['ftf_max']:.2f} / {m['ftf_jain']:.3f}"),
    ("wall s", lambda m: f"{m['wall_s']:.1f}"),
]  # fmt: skip


def _res(m: dict[str, Any]) -> str:
    if not m["reservations"]:
        return "-"
    pct = 100 * m["demoted"] / m["reservations"]
    return f"{m['reservations']:,} / {m['demoted']:,} ({pct:.0f}%)"


def _h(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.2f}"


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.0f}%"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else "-"


def table(title: str, results: dict[str, dict[str, Any]]) -> str:
    names = list(results)
    lines = [f"### {title}", "", "| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for label, cell in ROWS:
        lines.append(f"| {label} | " + " | ".join(cell(results[n]) for n in names) + " |")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--trace", type=Path, default=SAMPLE, help="Philly CSV (default: the sample)")
    p.add_argument("--full", action="store_true", help="three 2-week windows of the full trace")
    p.add_argument("--windows", help="comma list START:DAYS (ISO date) or 'all'")
    p.add_argument("--shapes", default="philly640,small")
    p.add_argument("--modes", default=",".join(DEMOTION_MODES))
    p.add_argument("--json", type=Path, help="also write every figure to this file")
    p.add_argument("--limits", help="LO,HI: user-style time limits on Philly jobs (SPEC R7)")
    p.add_argument("--limits-seed", type=int, default=0, help="seed of --limits")
    a = p.parse_args()
    lo, hi = (float(x) for x in a.limits.split(",")) if a.limits else (0.0, 0.0)
    limits = (lo, hi) if a.limits else None
    windows = a.windows.split(",") if a.windows else FULL_WINDOWS if a.full else SHORT_WINDOWS
    if a.full and a.trace == SAMPLE and not a.windows:
        print("--full needs --trace with the full Philly trace (data/README.md)", file=sys.stderr)
        return 2
    pols = policies(a.modes.split(","))
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for shape in a.shapes.split(","):
        for k, window in enumerate(windows):
            if shape.startswith("philly"):
                cluster, jobs = philly_case(a.trace, window, int(shape[6:]), limits, a.limits_seed)
                lim = f", limits x{a.limits} seed {a.limits_seed}" if limits else ""
                title = f"{shape}, {a.trace.name} window {window} ({len(jobs):,} jobs{lim})"
            else:
                cluster, jobs = small_case(seed=k)
                title = f"small 8x2 GPUs, synthetic seed {k} ({len(jobs):,} jobs)"
            res = {}
            for name, params in pols:
                res[name] = measure(cluster, jobs, params)
                print(f"# {title}: {name} done in {res[name]['wall_s']:.1f} s", file=sys.stderr)
            out[title] = res
            print(table(title, res) + "\n", flush=True)
            if a.json:
                a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
