"""Convert the Philly trace (CSV: timestamp,duration,num_gpus,gpu_time,cluster) to a workload.

* each virtual cluster id becomes a lab `vc-<id>`; its jobs are dealt round-robin, in submission
  order, to `users_per_lab` synthetic users `vc-<id>-u<k>` (deterministic: same trace, same users);
* `submit_s` is relative to the first kept job, optionally multiplied by `scale`
  (scale < 1 packs arrivals closer = more load; durations are never scaled);
* jobs wider than `max_gpus` (default 8, SPEC Q1) are clamped to `max_gpus` by default (duration
  kept), or dropped with `oversize="drop"`;
* an optional window `[start, start + days)` keeps part of the trace;
* optional user-style time limits (`limits=(lo, hi)`, SPEC R7's evaluation): each job's run
  × a factor drawn uniformly in [lo, hi], rounded up to the hour, as users overestimate; the
  draw is seeded per job id (`limits_seed`), so a job has the same limit in every window.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

import msgspec

from jpu.sim.workload import WorkloadError, WorkloadJob

Oversize = Literal["clamp", "drop"]


class ConvertOptions(msgspec.Struct, frozen=True, kw_only=True):
    users_per_lab: int = 3
    start: datetime | None = None
    days: float | None = None
    scale: float = 1.0
    max_gpus: int = 8
    oversize: Oversize = "clamp"
    limits: tuple[float, float] | None = None  # user-style time limits: run × U(lo, hi), ↑ 1 h
    limits_seed: int = 0


class ConvertStats(msgspec.Struct, kw_only=True):
    read: int = 0
    kept: int = 0
    clamped: int = 0
    dropped_oversize: int = 0
    outside_window: int = 0


def lab_name(cluster_id: str) -> str:
    return f"vc-{cluster_id}"


def user_name(cluster_id: str, k: int) -> str:
    return f"{lab_name(cluster_id)}-u{k}"


def user_limit(job_id: str, duration_s: float, lo: float, hi: float, seed: int) -> float:
    """A limit as a user gives it: the run × U(lo, hi), rounded up to the hour (at least 1 h),
    drawn from (seed, job id) alone."""
    factor = random.Random(f"{seed}:{job_id}").uniform(lo, hi)
    return max(1.0, math.ceil(duration_s * factor / 3600.0)) * 3600.0


def _rows(lines: Iterable[str], source: str) -> Iterator[tuple[int, datetime, float, int, str]]:
    reader = csv.DictReader(lines)
    missing = {"timestamp", "duration", "num_gpus", "cluster"} - set(reader.fieldnames or [])
    if missing:
        raise WorkloadError(f"{source}: missing columns {sorted(missing)}")
    for row in reader:
        lineno = reader.line_num
        try:
            ts = datetime.fromisoformat(row["timestamp"])
            duration = float(row["duration"])
            gpus = int(float(row["num_gpus"]))
        except (TypeError, ValueError) as e:
            raise WorkloadError(f"{source}:{lineno}: {e}") from e
        if duration < 0 or gpus < 1 or not row["cluster"]:
            raise WorkloadError(f"{source}:{lineno}: bad duration/num_gpus/cluster")
        yield lineno, ts, duration, gpus, row["cluster"]


def convert_rows(
    lines: Iterable[str], opts: ConvertOptions, source: str = "<philly>"
) -> tuple[list[WorkloadJob], ConvertStats]:
    """Jobs sorted by submission time (ties by trace line), plus what was kept/clamped/dropped."""
    if opts.users_per_lab < 1 or opts.scale <= 0 or opts.max_gpus < 1:
        raise WorkloadError("users_per_lab, scale and max_gpus must be positive")
    if opts.limits is not None and not 1.0 <= opts.limits[0] <= opts.limits[1]:
        raise WorkloadError("limits: need 1 <= lo <= hi (a limit never cuts a run short)")
    stats = ConvertStats()
    end = opts.start + timedelta(days=opts.days) if opts.start and opts.days else None
    rows = []
    for lineno, ts, duration, gpus, cluster in _rows(lines, source):
        stats.read += 1
        if (opts.start and ts < opts.start) or (end and ts >= end):
            stats.outside_window += 1
            continue
        if gpus > opts.max_gpus:
            if opts.oversize == "drop":
                stats.dropped_oversize += 1
                continue
            stats.clamped += 1
            gpus = opts.max_gpus
        rows.append((ts, lineno, duration, gpus, cluster))
    rows.sort()
    if opts.days and not opts.start and rows:  # window from the first job
        first = rows[0][0]
        kept = [r for r in rows if r[0] < first + timedelta(days=opts.days)]
        stats.outside_window += len(rows) - len(kept)
        rows = kept
    jobs: list[WorkloadJob] = []
    dealt: dict[str, int] = {}
    t0 = rows[0][0] if rows else None
    for ts, lineno, duration, gpus, cluster in rows:
        k = dealt.get(cluster, 0)
        dealt[cluster] = k + 1
        assert t0 is not None
        jid = f"p{lineno - 1:06d}"  # the trace's data row number: stable across windows
        lim = opts.limits
        jobs.append(
            WorkloadJob(
                id=jid,
                lab=lab_name(cluster),
                user=user_name(cluster, k % opts.users_per_lab),
                submit_s=round((ts - t0).total_seconds() * opts.scale, 3),
                num_gpus=gpus,
                duration_s=duration,
                time_limit_s=None
                if lim is None
                else user_limit(jid, duration, lim[0], lim[1], opts.limits_seed),
            )
        )
    stats.kept = len(jobs)
    return jobs, stats


def convert_file(path: str | Path, opts: ConvertOptions) -> tuple[list[WorkloadJob], ConvertStats]:
    p = Path(path)
    try:
        with p.open(newline="") as f:
            return convert_rows(f, opts, str(p))
    except OSError as e:
        raise WorkloadError(f"{p}: {e}") from e
