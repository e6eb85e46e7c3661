"""The dispatcher and intake with 10k array tasks queued vs 10k single jobs (SPEC Q7, D3, Q5):
`python bench/bench_cycle_arrays.py [--jobs 10000] [--users 100] [--runs 21]`.

One cluster (125 nodes × 8 GPUs of four tiers = 1,000 GPUs, 98 % busy with running jobs), the
same queued work submitted two ways through the services' own fold (ClusterState, `evolve`):
`--users` users each submit `--jobs / --users` single jobs, or each one array of as many tasks.
Timed for each shape (median wall and CPU of `--runs`):

- fold: applying the submits (N JobSubmitted, or one per array creating its tasks, Q7);
- cycle: what the dispatcher does per cycle, `cycle(snapshot(state))` (D3), with every job or
  task in the global queue;
- promote: intake's promotion pass `to_promote` (Q5) with every job or task in the personal
  queues and each user at their limit — for arrays with a `%8` throttle (Q7) holding 8 slots.

The aim (issue: "same order of cost") is arrays / singles within 2× on each line.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from itertools import count

from bench_cycle import TIERS, p99, timed

from jpu.bus import Delivered
from jpu.config import Cluster, Node
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dispatch import snapshot
from jpu.domain.promotion import to_promote
from jpu.events import Event, JobArray, JobDispatched, JobPromoted, JobStarted, JobSubmitted
from jpu.policy import cycle

NOW = 1_000_000.0
LIMIT = 8  # max_active_jobs of every user (Q5), and the arrays' %8


def cluster() -> Cluster:
    names = list(TIERS)
    nodes = [Node(name=f"node{n:04d}", gpus={names[n % 4]: 8}) for n in range(125)]
    return Cluster(tiers=list(TIERS.values()), nodes=nodes)


class Log:
    def __init__(self, c: Cluster) -> None:
        self.state = ClusterState.new(c, keep_ended=False)  # as the services fold
        self.seq = count(1)

    def add(self, event: Event) -> None:
        evolve(self.state, Delivered(seq=next(self.seq), subject="s", event=event, headers={}))


def _submit(job_id: str, user: str, array: JobArray | None = None) -> JobSubmitted:
    lab = f"lab{int(user[1:]) % 20:02d}"
    return JobSubmitted(
        event_id=f"s-{job_id}", ts=NOW - 600, job_id=job_id, lab=lab, user=user, name="sweep",
        command="true", num_gpus=1, time_limit_s=3600, array=array,
    )  # fmt: skip


def _running(log: Log, c: Cluster) -> None:
    """98 % of the GPUs run a job of another user each (a cycle then finds few free GPUs)."""
    k = 0
    for node in c.nodes:
        for tier, n in node.gpus.items():
            for g in range(n):
                k += 1
                if k % 50 == 0:
                    continue  # 2 % idle
                jid = f"r{k:05d}"
                log.add(_submit(jid, f"u{1000 + k}"))
                log.add(JobPromoted(event_id=f"p-{jid}", ts=NOW - 500, job_id=jid,
                                    queue_entered_at=NOW - 500))  # fmt: skip
                log.add(JobDispatched(event_id=f"d-{jid}", ts=NOW - 400, job_id=jid, attempt=1,
                                      node=node.name, tier=tier, gpus=[g]))  # fmt: skip
                log.add(JobStarted(event_id=f"t-{jid}", ts=NOW - 399, job_id=jid, attempt=1,
                                   backend_job_id="b"))  # fmt: skip


def submits(shape: str, jobs: int, users: int, throttle: int | None) -> list[JobSubmitted]:
    per = jobs // users
    if shape == "singles":
        return [_submit(f"j{u:03d}x{i:05d}", f"u{u}") for u in range(users) for i in range(per)]
    spec = f"0-{per - 1}" + (f"%{throttle}" if throttle else "")
    tasks = list(range(per))
    return [
        _submit(f"a{u:03d}", f"u{u}", JobArray(tasks=tasks, throttle=throttle, spec=spec))
        for u in range(users)
    ]


def built(c: Cluster, events: list[JobSubmitted], promote: str) -> Log:
    """The cluster running, then `events` folded; `promote`: "all" (the global queue holds every
    job), "limit" (the personal queues, each user holding LIMIT slots as intake leaves them)."""
    log = Log(c)
    _running(log, c)
    for e in events:
        log.add(e)
    ids = [j for q in list(log.state.personal.values()) for j in q]
    if promote == "limit":
        ids = to_promote(log.state, None, {}, LIMIT)
    for jid in ids:
        log.add(JobPromoted(event_id=f"p-{jid}", ts=NOW - 300, job_id=jid,
                            queue_entered_at=NOW - 300))  # fmt: skip
    return log


def summary(fn: Callable[[], object], runs: int) -> tuple[float, float, float]:
    """Median wall, p99 wall, median CPU (this thread) seconds of bench_cycle's `timed` runs."""
    wall, cpu = timed(fn, runs)
    return statistics.median(wall), p99(wall), statistics.median(cpu)


def fold_once(c: Cluster, events: list[JobSubmitted]) -> Callable[[], object]:
    def run() -> object:
        log = Log(c)
        for e in events:
            log.add(e)
        return log

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--users", type=int, default=100)
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    c = cluster()
    rows: dict[str, dict[str, tuple[float, float, float]]] = {}
    for shape in ("singles", "arrays"):
        print(f"{shape}: building …", file=sys.stderr)
        plain = submits(shape, args.jobs, args.users, None)
        rows.setdefault("fold", {})[shape] = summary(fold_once(c, plain), max(3, args.runs // 4))
        queued = built(c, plain, "all")
        assert len(queued.state.queue) == args.jobs
        snap_cycle = lambda s=queued.state: cycle(snapshot(s, c), NOW)  # noqa: E731
        dispatched = len(snap_cycle().dispatches)
        rows.setdefault("cycle", {})[shape] = summary(snap_cycle, args.runs)
        personal = built(c, submits(shape, args.jobs, args.users, LIMIT), "limit")
        waiting = sum(len(q) for q in personal.state.personal.values())
        promote = lambda s=personal.state: to_promote(s, None, {}, LIMIT)  # noqa: E731
        assert promote() == []  # every user at their limit (and every array at its %8)
        rows.setdefault("promote", {})[shape] = summary(promote, args.runs)
        print(f"  {shape}: cycle dispatches {dispatched}, personal queues hold {waiting}",
              file=sys.stderr)  # fmt: skip
    print(f"{args.jobs} queued, {args.users} users, 1,000 GPUs (98 % busy); ms: median / p99 / cpu")
    print(f"{'':>8} | {'singles':>24} | {'arrays':>24} | arrays/singles (cpu)")
    for what, by in rows.items():
        s, a = by["singles"], by["arrays"]
        cell = lambda t: f"{t[0] * 1e3:>7.2f} / {t[1] * 1e3:>6.2f} / {t[2] * 1e3:>6.2f}"  # noqa: E731
        print(f"{what:>8} | {cell(s)} | {cell(a)} | {a[2] / s[2]:.2f}")


if __name__ == "__main__":
    main()
