"""Folding an array whose tasks depend on one job (SPEC Q7, Q8):
`python bench/bench_fold_dependents.py [--tasks 1000 10000 20000] [--runs 3]`.

One JobSubmitted of N tasks with `afterok:<parent>` on a job still queued, folded by the
services' own fold (ClusterState, `evolve`): each task waits on the parent, so the fold adds N
dependents to one parent. Reference in the same run: the same array without a dependency. The
aim is linear: the cost per task does not grow with N (10k tasks well under 1 s).

Second figure: with that array waiting in its user's personal queue, 1,000 single jobs the user
submits after it are promoted past it (Q5, Q8): the cost of each promotion must not grow with N.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from bench_cycle import timed
from bench_cycle_arrays import NOW, Log, cluster

from jpu.domain.cluster import ClusterState
from jpu.events import JobArray, JobPromoted, JobSubmitted


def _submit(
    job_id: str, array: JobArray | None = None, dependency: str | None = None
) -> JobSubmitted:
    return JobSubmitted(
        event_id=f"s-{job_id}", ts=NOW, job_id=job_id, lab="lab00", user="u0", name="sweep",
        command="true", num_gpus=1, time_limit_s=3600, array=array, dependency=dependency,
    )  # fmt: skip


def fold(tasks: int, dependency: bool) -> Callable[[], ClusterState]:
    c = cluster()
    parent = _submit("parent")
    array = JobArray(tasks=list(range(tasks)), throttle=None, spec=f"0-{tasks - 1}")
    child = _submit("a", array, "afterok:parent" if dependency else None)

    def run() -> ClusterState:
        log = Log(c)
        log.add(parent)
        log.add(child)
        return log.state

    return run


def past(tasks: int, runs: int, singles: int = 1000) -> list[float]:
    """CPU seconds (this thread) of `singles` promotions of jobs submitted after the waiting
    array (each leaves the personal queue behind the array's N tasks), one figure a run; the
    fold before them is not timed."""
    c = cluster()
    array = JobArray(tasks=list(range(tasks)), throttle=None, spec=f"0-{tasks - 1}")
    before = [_submit("parent"), _submit("a", array, "afterok:parent")]
    before += [_submit(f"s{i:05d}") for i in range(singles)]
    promoted = [
        JobPromoted(event_id=f"p-{i}", ts=NOW, job_id=f"s{i:05d}", queue_entered_at=NOW)
        for i in range(singles)
    ]
    cpu = []
    for _ in range(runs):
        log = Log(c)
        for e in before:
            log.add(e)
        c0 = time.thread_time()
        for p in promoted:
            log.add(p)
        cpu.append(time.thread_time() - c0)
    return cpu


def main(args: argparse.Namespace) -> None:
    for n in args.tasks:
        state = fold(n, True)()
        assert len(state.dependents["parent"]) == n  # every task waits on the parent
        dep_wall, dep_cpu = timed(fold(n, True), args.runs)
        ref_wall, ref_cpu = timed(fold(n, False), args.runs)
        d, r = statistics.median(dep_cpu), statistics.median(ref_cpu)
        print(
            f"fold of a {n:,}-task array with afterok on one job: "
            f"{statistics.median(dep_wall) * 1000:.0f} ms wall, {d * 1000:.0f} ms CPU "
            f"({d / n * 1e6:.1f} µs CPU a task); without the dependency "
            f"{statistics.median(ref_wall) * 1000:.0f} ms wall, {r * 1000:.0f} ms CPU "
            f"(ratio {d / r:.2f}×)"
        )
    for n in args.tasks:
        d = statistics.median(past(n, args.runs))
        print(
            f"1,000 promotions past a waiting {n:,}-task array: {d * 1000:.1f} ms CPU "
            f"({d / 1000 * 1e6:.1f} µs CPU a promotion)"
        )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, nargs="+", default=[1000, 10000, 20000])
    p.add_argument("--runs", type=int, default=3)
    main(p.parse_args())
