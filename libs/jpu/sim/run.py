"""Run one simulation: inputs in, DIR/events.jsonl + DIR/summary.json out (SPEC §10)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import IO, Any

import msgspec

from jpu.config import Cluster, load_cluster
from jpu.sim import backfill_service, summary
from jpu.sim.engine import CycleHook, Progress, Simulator
from jpu.sim.eventlog import EventLog
from jpu.sim.params import SimParams
from jpu.sim.workload import WorkloadJob, load_workload

EVENTS_FILE = "events.jsonl"
SUMMARY_FILE = "summary.json"


def stderr_progress(every_pct: float = 5.0, out: IO[str] | None = None) -> Progress:
    """U3: one line each time another `every_pct` % of the jobs has finished."""
    stream = out or sys.stderr
    started = time.perf_counter()
    state = {"next": every_pct}

    def report(done: int, total: int, vt: float) -> None:
        pct = 100.0 * done / total if total else 100.0
        if pct + 1e-9 < state["next"] and done != total:
            return
        while state["next"] <= pct + 1e-9:
            state["next"] += every_pct
        wall = time.perf_counter() - started
        print(
            f"sim: {pct:5.1f}% ({done}/{total} jobs) virtual {vt / 86400:7.2f} d, "
            f"wall {wall:6.1f} s",
            file=stream,
            flush=True,
        )

    return report


def simulate(
    cluster: Cluster,
    jobs: list[WorkloadJob],
    params: SimParams,
    events_out: IO[bytes] | None = None,
    on_cycle: CycleHook | None = None,
) -> dict[str, Any]:
    """Simulate in memory; the event log goes to `events_out` (if any). Returns the summary.
    `on_cycle` sees every cycle's (state seq, time, snapshot, result), e.g. rank and reasons."""
    progress = stderr_progress() if params.progress else None
    sim = Simulator(cluster, jobs, params, EventLog(events_out), progress, on_cycle)
    end = sim.run()
    backfill_service.close(sim, end)
    return summary.build(sim, end)


def run_files(
    cluster_path: str | Path, workload_path: str | Path, out_dir: str | Path, params: SimParams
) -> dict[str, Any]:
    """The `jpu simulate` entry: read the files, simulate, write events.jsonl and summary.json."""
    cluster = load_cluster(cluster_path)
    jobs = load_workload(workload_path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with (out / EVENTS_FILE).open("wb") as f:
        result = simulate(cluster, jobs, params, f)
    result["inputs"] = {"cluster": str(cluster_path), "workload": str(workload_path)}
    (out / SUMMARY_FILE).write_bytes(msgspec.json.format(msgspec.json.encode(result), indent=1))
    return result
