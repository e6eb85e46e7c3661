"""Simulator benchmark (SPEC §10): the Philly trace through jpu, fifo and slurm-like — the whole
trace once `make philly-trace` fetched it to data/philly.csv, else the bundled 2,000-job sample.

    python bench/bench_sim.py                 # first 10,000 jobs of the trace (~1 min in all)
    python bench/bench_sim.py --jobs 0        # the whole trace (82,247 jobs)

Prints simulated jobs per wall second for each policy, with the reference measured in the same
run: the time to just read and decode the workload file (ratio = simulation / reference), and
side by side the outcome: mean/p99 wait by num_gpus, max wait of multi-GPU jobs, utilization
(research / with backfill) and Jain's fairness of lab usage. Progress goes to stderr (U3).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jpu.config import load_cluster
from jpu.sim.params import SimParams
from jpu.sim.philly import ConvertOptions, convert_file
from jpu.sim.run import simulate
from jpu.sim.workload import dump_jobs, load_workload

ROOT = Path(__file__).resolve().parent.parent
FULL_TRACE = ROOT / "data" / "philly.csv"  # `make philly-trace` fetches it (data/README.md)
TRACE = FULL_TRACE if FULL_TRACE.exists() else ROOT / "data" / "philly-sample.csv"
CLUSTER = ROOT / "config" / "philly-cluster.yaml"


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=10_000, help="first N jobs; 0 = the whole trace")
    p.add_argument("--trace", type=Path, default=TRACE)
    p.add_argument("--cluster", type=Path, default=CLUSTER)
    p.add_argument("--policies", default="jpu,fifo,slurm-like")
    p.add_argument("--backfill", choices=["on", "off"], default="on")
    return p.parse_args()


def _fmt_wait(s: dict[str, Any], n: str, key: str) -> str:
    w = s["wait_s_by_num_gpus"].get(n)
    return f"{w[key] / 3600:8.2f}" if w and w.get("count") else "       -"


def _table(
    results: dict[str, tuple[dict[str, Any], float]],
    total: int,
    ref_s: float,
    cpu: dict[str, float],
) -> None:
    names = list(results)
    print(f"{'':34}" + "".join(f"{n:>14}" for n in names))

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:34}" + "".join(f"{c:>14}" for c in cells))

    row("wall s", [f"{w:.1f}" for _, w in results.values()])
    row("process CPU s", [f"{cpu[n]:.2f}" for n in names])  # steadier than wall on a busy box
    row("simulated jobs / wall s", [f"{total / w:,.0f}" for _, w in results.values()])
    row("ratio to read+decode", [f"{w / ref_s:,.0f}x" for _, w in results.values()])
    row("cycles run / skipped", [f"{s['counts']['cycles']}/{s['counts']['cycles_skipped']}"
                                 for s, _ in results.values()])  # fmt: skip
    widths = sorted({n for s, _ in results.values() for n in s["wait_s_by_num_gpus"]}, key=int)
    for n in widths:
        row(f"wait h, {n} GPU: mean", [_fmt_wait(s, n, "mean") for s, _ in results.values()])
        row(f"wait h, {n} GPU: p99", [_fmt_wait(s, n, "p99") for s, _ in results.values()])
    row("max wait h, multi-GPU jobs",
        [f"{s['max_wait_multi_gpu_s'] / 3600:.2f}" for s, _ in results.values()])  # fmt: skip
    row("utilization research", [f"{s['gpu_utilization']['research']:.3f}"
                                 for s, _ in results.values()])  # fmt: skip
    row("utilization with backfill", [f"{s['gpu_utilization']['with_backfill']:.3f}"
                                      for s, _ in results.values()])  # fmt: skip
    row("Jain fairness (decayed usage)", [f"{s['jain_fairness']:.3f}" for s, _ in results.values()])
    row("Jain fairness (total charged)",
        [f"{s['jain_fairness_charged']:.3f}" for s, _ in results.values()])  # fmt: skip
    row("R3 demotions", [str(s["counts"]["demotions"]) for s, _ in results.values()])
    row("max global queue", [str(s["counts"]["max_global_queue"]) for s, _ in results.values()])
    row("makespan d", [f"{s['makespan_s'] / 86400:.2f}" for s, _ in results.values()])


def main() -> int:
    a = _args()
    cluster = load_cluster(a.cluster)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        jobs, stats = convert_file(a.trace, ConvertOptions())
        if a.jobs:
            jobs = jobs[: a.jobs]
        workload = Path(tmp) / "jobs.jsonl"
        dump_jobs(jobs, workload)
        print(f"converted {stats.read} trace rows ({stats.clamped} clamped to 8 GPUs) in "
              f"{time.perf_counter() - t0:.2f} s; simulating {len(jobs)} jobs on "
              f"{a.cluster.name}", file=sys.stderr)  # fmt: skip
        t0 = time.perf_counter()
        jobs = load_workload(workload)  # the reference: just read + decode the workload
        ref_s = time.perf_counter() - t0
        results: dict[str, tuple[dict[str, Any], float]] = {}
        cpu: dict[str, float] = {}
        for policy in a.policies.split(","):
            print(f"-- {policy}", file=sys.stderr)
            params = SimParams(policy=policy, backfill=a.backfill == "on", progress=True)
            t0, c0 = time.perf_counter(), time.process_time()
            with (Path(tmp) / f"events-{policy}.jsonl").open("wb") as f:
                summary = simulate(cluster, jobs, params, f)
            results[policy] = (summary, time.perf_counter() - t0)
            cpu[policy] = time.process_time() - c0
    print(f"reference: read+decode {len(jobs)} workload lines in {ref_s:.3f} s "
          f"({len(jobs) / ref_s:,.0f} jobs/s)")  # fmt: skip
    _table(results, len(jobs), ref_s, cpu)
    return 0


if __name__ == "__main__":
    sys.exit(main())
