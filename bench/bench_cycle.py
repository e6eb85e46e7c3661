"""Benchmark of the dispatch cycle (SPEC D3) at scale: `python bench/bench_cycle.py [--quick]`.

Snapshots: 4 tiers, 8-GPU nodes, 200 labs; queue 1k/10k/100k × GPUs 1k/10k; most GPUs busy with
running jobs, a few percent idle (some backfilled), a few reservations held by queued jobs.
The cycle is timed on the two queue representations a Snapshot accepts: a flat list (sorted by
the cycle, as the gateway passes it) and `LabQueues` (grouped by lab, kept incrementally by the
dispatcher's fold and the simulator — built here once, outside the timing, as they do).
Prints median and p99 of `cycle()`, the growth per 10× queue, and as reference measured in the
same run the time of `sorted()` of the queue by its D1 key tuple (ratios cycle/sort). The aim
(SPEC D3) is ≤ 50 ms median at 100k queued jobs × 10k GPUs with `LabQueues`.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial

import msgspec

from jpu.config import Tier
from jpu.policy import cycle
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import Gpu, LabUsage, QueuedJob, Reservation, Snapshot
from jpu.policy.ordering import lab_usage_at

TIERS = {
    t.name: t
    for t in (
        Tier(
            name="h100",
            model="H100",
            vram_gb=80,
            tflops=989.0,
            sort_order=40,
            max_gpus=8,
            partition="h100",
        ),
        Tier(
            name="a100",
            model="A100",
            vram_gb=40,
            tflops=312.0,
            sort_order=30,
            max_gpus=8,
            partition="a100",
        ),
        Tier(
            name="rtx4090",
            model="RTX 4090",
            vram_gb=24,
            tflops=82.6,
            sort_order=20,
            max_gpus=8,
            partition="rtx4090",
        ),
        Tier(
            name="rtx3080ti",
            model="RTX 3080 Ti",
            vram_gb=12,
            tflops=34.1,
            sort_order=10,
            max_gpus=8,
            partition="rtx3080ti",
        ),
    )
}
NAMES = list(TIERS)


def build(queue_len: int, n_gpus: int, seed: int = 7) -> tuple[Snapshot, float]:
    rnd = random.Random(seed)
    now = 1_000_000.0
    labs = [f"lab{i:03d}" for i in range(200)]
    gpus: list[Gpu] = []
    for n in range(n_gpus // 8):
        tier = NAMES[n % 4]
        for i in range(8):
            r = rnd.random()
            state = (
                "free"
                if r < 0.02
                else f"backfill:bf-{n}-{i}"
                if r < 0.04
                else "down"
                if r < 0.045
                else f"job:r{n}-{i // 2}"
            )
            gpus.append(Gpu(f"node{n:05d}", tier, i, state))
    queue: list[QueuedJob] = []
    for i in range(queue_len):
        r = rnd.random()
        queue.append(
            QueuedJob(
                job_id=f"q{i:07d}",
                lab=rnd.choice(labs),
                user=f"u{rnd.randrange(2000)}",
                num_gpus=rnd.choice((1, 1, 1, 1, 2, 2, 4, 8)),
                queue_entered_at=now - queue_len + i,
                tiers=frozenset(rnd.sample(NAMES, 2)) if r < 0.1 else None,
                min_vram_gb=40 if 0.1 <= r < 0.15 else None,
            )
        )
    # a few reservations held by queued jobs (most will be demoted, R3)
    for k in range(5):
        j = queue[rnd.randrange(queue_len)]
        node = f"node{k * 4:05d}"
        gpus = [
            Gpu(g.node, g.tier, g.index, f"reserved:{j.job_id}")
            if g.node == node and g.index == 7
            else g
            for g in gpus
        ]
        res = Reservation(node=node, tier=NAMES[0], gpus=(7,), since=now - 60)
        queue[queue.index(j)] = QueuedJob(
            job_id=j.job_id,
            lab=j.lab,
            user=j.user,
            num_gpus=8,
            queue_entered_at=j.queue_entered_at,
            reservation=res,
        )
    usage = {lab: LabUsage(rnd.uniform(0, 1e9), now - rnd.uniform(0, 1e6)) for lab in labs}
    return Snapshot(tiers=TIERS, gpus=gpus, queue=queue, usage=usage), now


def timed(fn: Callable[[], object], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU (this thread) seconds per run; CPU time is what a loaded machine distorts
    least (other processes' time slices are not counted)."""
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return wall, cpu


def p99(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, round(0.99 * (len(xs) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1k/10k queue only, fewer runs")
    args = ap.parse_args()
    sizes = (1_000, 10_000) if args.quick else (1_000, 10_000, 100_000)
    gpu_sizes = (1_000, 10_000)
    print(
        f"{'queue':>7} {'gpus':>6} | {'flat ms: med':>12} {'cpu':>6} |"
        f" {'lab ms: med':>11} {'p99':>6} {'cpu':>6} | {'sort ms: med':>12} {'cpu':>6} |"
        f" {'flat/sort':>9} {'lab/sort':>8} {'(cpu)':>6} | {'disp':>5}"
    )
    medians: dict[tuple[int, int], float] = {}
    for n_gpus in gpu_sizes:
        for q in sizes:
            print(f"building queue={q} gpus={n_gpus} …", file=sys.stderr)
            snap, now = build(q, n_gpus)
            grouped = msgspec.structs.replace(snap, queue=LabQueues(snap.queue))
            runs = 5 if args.quick else max(11, min(41, 2_000_000 // (q * 3)))
            res = cycle(grouped, now)
            assert res == cycle(snap, now), "the two queue representations disagree"
            fwall, fcpu = timed(partial(cycle, snap, now), runs)
            wall, cpu = timed(partial(cycle, grouped, now), runs)
            at = lab_usage_at({j.lab for j in snap.queue}, snap.usage, now, snap.half_life_s)

            def key(j: QueuedJob, at: dict[str, float] = at) -> tuple[float, float, str]:
                return (at[j.lab], j.queue_entered_at, j.job_id)

            swall, scpu = timed(partial(sorted, snap.queue, key=key), runs)
            fmed, fcmed = statistics.median(fwall), statistics.median(fcpu)
            med, cmed = statistics.median(wall), statistics.median(cpu)
            smed, scmed = statistics.median(swall), statistics.median(scpu)
            medians[(q, n_gpus)] = cmed
            print(
                f"{q:>7} {n_gpus:>6} | {fmed * 1e3:>12.2f} {fcmed * 1e3:>6.2f} |"
                f" {med * 1e3:>11.2f} {p99(wall) * 1e3:>6.2f} {cmed * 1e3:>6.2f} |"
                f" {smed * 1e3:>12.2f} {scmed * 1e3:>6.2f} |"
                f" {fmed / smed:>9.2f} {med / smed:>8.2f} {cmed / scmed:>6.2f} |"
                f" {len(res.dispatches):>5}"
            )
            print(f"  done in {sum(fwall) + sum(wall) + sum(swall):.1f}s", file=sys.stderr)
    print("growth per 10x queue length (LabQueues cycle CPU median ratio):")
    for n_gpus in gpu_sizes:
        ratios = [medians[(b, n_gpus)] / medians[(a, n_gpus)] for a, b in itertools.pairwise(sizes)]
        print(f"  gpus={n_gpus}: " + ", ".join(f"{r:.1f}x" for r in ratios))


if __name__ == "__main__":
    main()
