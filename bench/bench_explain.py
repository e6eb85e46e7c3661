"""Explanations benchmark (SPEC U4): the cost of `GET /v1/jobs/{id}/wait`, of the usage
ledger behind explain-usage / the statement, and of `GET /v1/queue?at=`, on a simulated log of the
Philly trace (the services' own policy and event types), in memory (no NATS: the pure folds).

    python bench/bench_explain.py                # 1,000 sample jobs on the 8-GPU default cluster
    python bench/bench_explain.py --cluster config/philly-cluster.yaml --jobs 2000
    python bench/bench_explain.py --db           # + explain-usage from the usage_ledger projection

Reference, measured in the same run: folding the whole log with the services' fold
(`jpu.domain.cluster.evolve`, what a service's start or a replay does). The wait of a job costs
one cycle per queue-changing event during its wait; printed for the jobs of median and longest
wait.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from jpu.bus import Delivered
from jpu.config import DEFAULT_PATH, load_cluster
from jpu.domain.cluster import ClusterState, evolve
from jpu.events import JobDispatched, JobPromoted
from jpu.explain.queue_at import fold_until, queue_at
from jpu.explain.usage import explain_usage, ledger, usage_statement
from jpu.explain.wait import wait_timeline
from jpu.sim.eventlog import read_events
from jpu.sim.params import SimParams
from jpu.sim.philly import ConvertOptions, convert_file
from jpu.sim.run import simulate
from jpu.sim.workload import dump_jobs, load_workload

ROOT = Path(__file__).resolve().parent.parent
FULL_TRACE = ROOT / "data" / "philly.csv"
TRACE = FULL_TRACE if FULL_TRACE.exists() else ROOT / "data" / "philly-sample.csv"
HALF_LIFE = 7 * 24 * 3600.0


def _log(jobs_n: int, cluster_path: Path) -> tuple[object, list[Delivered]]:
    cluster = load_cluster(cluster_path)
    with tempfile.TemporaryDirectory() as tmp:
        jobs, _ = convert_file(TRACE, ConvertOptions())
        if jobs_n:
            jobs = jobs[:jobs_n]
        path = Path(tmp) / "jobs.jsonl"
        dump_jobs(jobs, path)
        out = io.BytesIO()
        simulate(cluster, load_workload(path), SimParams(backfill=False), out)
        (Path(tmp) / "events.jsonl").write_bytes(out.getvalue())
        events = read_events(Path(tmp) / "events.jsonl")
    return cluster, [Delivered(i + 1, "sim", e, {}) for i, e in enumerate(events)]


def _timed(fn: object, *args: object, **kw: object) -> tuple[object, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kw)  # type: ignore[operator]
    return out, time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=1_000, help="first N jobs of the trace")
    p.add_argument("--cluster", type=Path, default=DEFAULT_PATH,
                   help="default: SPEC §1.1's 8-GPU cluster (a long queue)")  # fmt: skip
    p.add_argument("--db", action="store_true",
                   help="also explain-usage from the usage_ledger projection")  # fmt: skip
    a = p.parse_args()
    cluster, log = _log(a.jobs, a.cluster)
    print(f"log: {len(log):,} events of {a.jobs:,} jobs on {a.cluster.name}")

    def fold_all() -> ClusterState:
        st = ClusterState.new(cluster, keep_ended=False)  # type: ignore[arg-type]
        for d in log:
            evolve(st, d)
        return st

    _, ref = _timed(fold_all)
    print(f"reference: fold of the whole log {ref:.3f} s ({len(log) / ref:,.0f} events/s)")
    waits: dict[str, float] = {}
    entered: dict[str, float] = {}
    for d in log:
        if isinstance(d.event, JobPromoted):
            entered[d.event.job_id] = d.event.ts
        elif isinstance(d.event, JobDispatched) and d.event.job_id in entered:
            waits.setdefault(d.event.job_id, d.event.ts - entered[d.event.job_id])
    ranked = sorted(waits, key=waits.__getitem__)
    picks = {"median wait": ranked[len(ranked) // 2], "longest wait": ranked[-1]}
    for label, jid in picks.items():
        t, s = _timed(wait_timeline, log, jid, cluster, half_life_s=HALF_LIFE)
        steps = len(t.steps)  # type: ignore[attr-defined]
        print(f"/wait, job of {label} ({waits[jid] / 3600:.1f} h): {s:.3f} s = "
              f"{s / ref:.2f}x the whole-log fold ({steps} steps)")  # fmt: skip
    book, s = _timed(ledger, log)
    print(f"usage ledger of the whole log: {s:.3f} s = {s / ref:.2f}x the fold "
          f"({len(book.lines):,} charges)")  # type: ignore[attr-defined]  # fmt: skip
    end = log[-1].event.ts
    labs = sorted({c.lab for c in book.lines})  # type: ignore[attr-defined]
    _, s = _timed(lambda: [explain_usage(book, lab, end, HALF_LIFE) for lab in labs])  # type: ignore[arg-type]
    print(f"explain-usage of all {len(labs)} labs from the ledger: {s * 1000:.1f} ms")
    _, s = _timed(usage_statement, book)
    print(f"usage statement from the ledger: {s * 1000:.1f} ms")
    mid = statistics.median(d.event.ts for d in log)
    q, s = _timed(lambda: queue_at(fold_until(log, mid, cluster), mid, cluster, HALF_LIFE))  # type: ignore[arg-type]
    print(f"queue?at= the log's median time (from seq 1): {s:.3f} s = {s / ref:.2f}x the fold "
          f"({q.global_length} queued)")  # type: ignore[attr-defined]  # fmt: skip
    if a.db:
        asyncio.run(_from_db(log, labs, end, ref))
    return 0


async def _from_db(log: list[Delivered], labs: list[str], end: float, ref: float) -> None:
    """What the admin API and `jpu-admin --db` do: one lab's lines by index from PostgreSQL."""
    from jpu.embedded.postgres import EmbeddedPostgres
    from jpu.store import create_pool, migrate
    from jpu.store.projection import apply_to_all
    from jpu.store.projections import lab_usage, usage_ledger
    from jpu.store.projections.usage_ledger import read_ledger

    root = Path(tempfile.mkdtemp(prefix="jpu-bench-explain-"))
    root.chmod(0o755)
    pg = EmbeddedPostgres(root / "pg")
    try:
        pool = await create_pool(pg.start(), max_size=2)
        await migrate(pool)
        for i in range(0, len(log), 4096):  # as accounting's projector commits
            await apply_to_all(
                pool, (lab_usage.projection, usage_ledger.projection), log[i : i + 4096]
            )
        times = []
        for lab in labs:
            t0 = time.perf_counter()
            explain_usage(await read_ledger(pool, lab=lab), lab, end, HALF_LIFE)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        print(f"explain-usage of one lab from the usage_ledger projection: median "
              f"{med * 1000:.1f} ms, max {max(times) * 1000:.1f} ms = {med / ref:.3f}x the "
              "whole-log fold")  # fmt: skip
        await pool.close()
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
