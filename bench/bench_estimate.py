"""Cost of one forward estimate (SPEC U4, issue 14): `python bench/bench_estimate.py [--quick]`.

A live-like `Present`: 4 tiers × 8-GPU nodes, 200 labs, 2,000 users; all but a few percent of
the GPUs run jobs ending within the next day (by their limits, some by predicted durations); the
queue is 1k/10k jobs of 1–8 GPUs, most with limits, a fifth without (predicted). The estimate is
what the dispatcher recomputes every `estimate_every_s`: build the forward simulator from the
Present and play it to the horizon or the cycle cap. Reference in the same run: one dispatch
`cycle()` on the same state (the estimate plays a few hundred of them). Aim: ≤ 1 s CPU at 10k
queued × 1k GPUs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time

from bench_cycle import NAMES, TIERS, timed

from jpu.policy import cycle
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import Gpu, LabUsage, QueuedJob, Snapshot
from jpu.sim.forward import (
    EstimateParams,
    ForwardJob,
    Present,
    QueuedNow,
    RunningNow,
    forward,
)

H = 3600.0


def build(queue_len: int, n_gpus: int, seed: int = 11) -> Present:
    rnd = random.Random(seed)
    now = 10_000_000.0
    labs = [f"lab{i:03d}" for i in range(200)]
    users = [(f"u{i:04d}", labs[i % 200]) for i in range(2000)]
    gpus: list[Gpu] = []
    running: list[RunningNow] = []
    for n in range(n_gpus // 8):
        tier, node = NAMES[n % 4], f"node{n:05d}"
        i = 0
        while i < 8:
            if rnd.random() < 0.04:
                gpus.append(Gpu(node, tier, i))
                i += 1
                continue
            k = min(rnd.choice((1, 1, 2, 2, 4, 8)), 8 - i)
            user, lab = rnd.choice(users)
            jid = f"r{n}-{i}"
            limit = rnd.choice((2, 4, 8, 12, 24)) * H
            predicted = rnd.random() < 0.2
            started = now - rnd.uniform(0, limit)
            fj = ForwardJob(
                job_id=jid,
                lab=lab,
                user=user,
                num_gpus=k,
                time_limit_s=None if predicted else limit,
                duration_s=limit,
                basis="predicted" if predicted else "limits",
            )
            running.append(
                RunningNow(
                    job=fj, node=node, tier=tier, gpus=tuple(range(i, i + k)), started_at=started
                )
            )
            gpus.extend(Gpu(node, tier, g, f"job:{jid}") for g in range(i, i + k))
            i += k
    queued: list[QueuedNow] = []
    for q in range(queue_len):
        user, lab = rnd.choice(users)
        n = rnd.choice((1, 1, 1, 1, 2, 2, 4, 8))
        limit = rnd.choice((1, 2, 4, 8, 24)) * H
        predicted = rnd.random() < 0.2
        jid = f"q{q:06d}"
        fj = ForwardJob(
            job_id=jid,
            lab=lab,
            user=user,
            num_gpus=n,
            time_limit_s=None if predicted else limit,
            duration_s=limit,
            basis="predicted" if predicted else "limits",
        )
        rec = QueuedJob(
            job_id=jid,
            lab=lab,
            user=user,
            num_gpus=n,
            queue_entered_at=now - queue_len + q,
            time_limit_s=fj.time_limit_s,
        )
        queued.append(QueuedNow(job=fj, record=rec))
    usage = {lab: LabUsage(rnd.uniform(0, 1e9), now - rnd.uniform(0, 1e6)) for lab in labs}
    return Present(
        now=now,
        tiers=TIERS,
        gpus=gpus,
        usage=usage,
        half_life_s=7 * 86400.0,
        running=running,
        queued=queued,
        limits={u: 10_000 for u, _ in users},  # every queued job already global (Q5 aside)
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    ap.add_argument("--max-cycles", type=int, default=EstimateParams().max_cycles)
    ap.add_argument("--growth", type=float, default=EstimateParams().growth)
    ap.add_argument("--resolution", type=float, default=EstimateParams().resolution_s)
    args = ap.parse_args()
    params = EstimateParams(
        max_cycles=args.max_cycles, growth=args.growth, resolution_s=args.resolution
    )
    runs = 3 if args.quick else 5
    print(
        f"{'queue':>6} {'gpus':>5} | {'estimate cpu s: med':>19} {'max':>6} | {'cycle ms':>8} |"
        f" {'ratio':>6} | {'cycles':>6} {'reached h':>9} {'started':>8} {'unknown':>8}"
    )
    for q, g in ((1_000, 1_000), (10_000, 1_000)):
        print(f"building queue={q} gpus={g} …", file=sys.stderr)
        present = build(q, g)
        snap = Snapshot(
            tiers=present.tiers,
            gpus=present.gpus,
            queue=LabQueues(x.record for x in present.queued),
            usage=present.usage,
        )
        _, ccpu = timed(lambda s=snap, t=present.now: cycle(s, t), 11)
        res = forward(present, params)
        _, cpu = timed(lambda p=present: forward(p, params), runs)
        unknown = sum(1 for e in res.estimates.values() if e.start is None)
        med, cmed = statistics.median(cpu), statistics.median(ccpu)
        print(
            f"{q:>6} {g:>5} | {med:>19.3f} {max(cpu):>6.3f} | {cmed * 1e3:>8.2f} |"
            f" {med / cmed:>6.0f} | {res.cycles:>6} {(res.reached - present.now) / H:>9.1f}"
            f" {len(res.estimates) - unknown:>8} {unknown:>8}"
        )
    print(f"params: {params}", file=sys.stderr)
    t = time.process_time()
    print(f"total process CPU {t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
