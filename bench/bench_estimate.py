"""Cost of one forward estimate (SPEC U4): `python bench/bench_estimate.py [--quick] [--split]`.

A live-like fold (folded from the events that lead to it): 4 tiers × 8-GPU nodes, 200 labs,
2,000 users; all but a few percent of the GPUs run jobs ending within the next day (by their
limits, some by predicted durations); the queue is 1k/10k jobs of 1–8 GPUs, most with limits, a
fifth without (predicted). The estimate is what the dispatcher recomputes every
`estimate_every_s`: copy the fold into a `Present`, build the forward simulator from it and play
it to the horizon or the cycle cap. Reference in the same run: one dispatch
`cycle()` on the same state (the estimate plays a few hundred of them). Aim: ≤ 1 s CPU at 10k
queued × 1k GPUs. `--digest` hashes the estimates themselves (1k and 10k queues), to check that
a change made for speed leaves every start as it was.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import sys
import time
from typing import NamedTuple, cast

import msgspec
from bench_cycle import NAMES, TIERS, timed

from jpu.config import Cluster, Node
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.holdings import gpus
from jpu.events import (
    AnyEvent,
    Delivered,
    Event,
    JobDispatched,
    JobPromoted,
    JobStarted,
    JobSubmitted,
    UsageCharged,
)
from jpu.policy import cycle
from jpu.policy.model import Snapshot
from jpu.sim.forward import Assumed, EstimateParams, ForwardSim, Present, forward, taken

H = 3600.0
HALF_LIFE_S = 7 * 86400.0


class Live(NamedTuple):
    """The dispatcher's fold at `now` and what the estimate assumes of each job in it."""

    state: ClusterState
    assumed: dict[str, Assumed]
    now: float
    limits: dict[str, int]

    def present(self) -> Present:
        """What the dispatcher takes between two cycles (jpu.explain.estimate.present, with the
        bench's own assumptions)."""
        state = self.state
        return Present(
            now=self.now,
            jobs=taken(state, self.assumed),
            assumed=self.assumed,
            inventory=dict(state.inventory),
            down=frozenset(state.down),
            usage=dict(state.usage),  # nothing owed: every charge is settled in this fold
            tiers=TIERS,
            half_life_s=HALF_LIFE_S,
            limits=self.limits,  # every queued job already global (Q5 aside)
        )


def build(queue_len: int, n_gpus: int, seed: int = 11) -> Live:
    """The live fold, folded from the events that lead to it (as the dispatcher's is)."""
    rnd = random.Random(seed)
    now = 10_000_000.0
    labs = [f"lab{i:03d}" for i in range(200)]
    users = [(f"u{i:04d}", labs[i % 200]) for i in range(2000)]
    nodes = [Node(name=f"node{n:05d}", gpus={NAMES[n % 4]: 8}) for n in range(n_gpus // 8)]
    state = ClusterState.new(Cluster(tiers=list(TIERS.values()), nodes=nodes), keep_ended=False)
    events: list[Event] = []
    assumed: dict[str, Assumed] = {}

    def job(
        jid: str, user: str, lab: str, n: int, limit: float, entered: float, predicted: bool
    ) -> None:
        events.append(
            JobSubmitted(
                event_id="", ts=now, job_id=jid, lab=lab, user=user, name=jid, command="",
                num_gpus=n, time_limit_s=None if predicted else int(limit),
            )
        )  # fmt: skip
        events.append(JobPromoted(event_id="", ts=now, job_id=jid, queue_entered_at=entered))
        assumed[jid] = Assumed(duration_s=limit, basis="predicted" if predicted else "limits")

    for n, node in enumerate(nodes):
        tier, i = NAMES[n % 4], 0
        while i < 8:
            if rnd.random() < 0.04:
                i += 1
                continue
            k = min(rnd.choice((1, 1, 2, 2, 4, 8)), 8 - i)
            user, lab = rnd.choice(users)
            jid = f"r{n}-{i}"
            limit = rnd.choice((2, 4, 8, 12, 24)) * H
            predicted = rnd.random() < 0.2
            started = now - rnd.uniform(0, limit)
            job(jid, user, lab, k, limit, started, predicted)
            gpus = list(range(i, i + k))
            events.append(
                JobDispatched(
                    event_id="", ts=started, job_id=jid, attempt=1, node=node.name, tier=tier,
                    gpus=gpus,
                )
            )  # fmt: skip
            events.append(
                JobStarted(event_id="", ts=started, job_id=jid, attempt=1, backend_job_id="")
            )
            assumed[jid] = msgspec.structs.replace(assumed[jid], ends_at=started + limit)
            i += k
    for q in range(queue_len):
        user, lab = rnd.choice(users)
        n = rnd.choice((1, 1, 1, 1, 2, 2, 4, 8))
        limit = rnd.choice((1, 2, 4, 8, 24)) * H
        job(f"q{q:06d}", user, lab, n, limit, now - queue_len + q, rnd.random() < 0.2)
    for lab in labs:
        value, as_of = rnd.uniform(0, 1e9), now - rnd.uniform(0, 1e6)
        events.append(
            UsageCharged(
                event_id=f"init-{lab}", ts=as_of, lab=lab, amount=0.0, value_after=value,
                as_of=as_of, reason="initial",
            )
        )  # fmt: skip
    for seq, e in enumerate(events, start=1):
        evolve(state, Delivered(seq, "", cast(AnyEvent, e), {}))
    return Live(state, assumed, now, {u: 10_000 for u, _ in users})


def split(params: EstimateParams, runs: int) -> None:
    """Where one 10k × 1k estimate's CPU goes: the Present (on the dispatcher's event loop), the
    forward simulator built from it (its fold) and the play (thread CPU, min of `runs`)."""
    live = build(10_000, 1_000)
    take, start, play = [], [], []
    for _ in range(runs):
        t0 = time.thread_time()
        present = live.present()
        t1 = time.thread_time()
        sim = ForwardSim(present, params)
        t2 = time.thread_time()
        sim.forward()
        take.append(t1 - t0)
        start.append(t2 - t1)
        play.append(time.thread_time() - t2)
    print(f"the Present (event loop):   min {min(take):.3f} s ({len(live.assumed)} jobs)")
    print(f"simulator from the Present: min {min(start):.3f} s")
    print(f"play forward:               min {min(play):.3f} s")


def digest(params: EstimateParams) -> None:
    """The full output of one estimate (every start, basis and why) on the 1k and 10k queues,
    hashed: a change meant to make the estimate cheaper must leave these unchanged."""
    for q in (1_000, 10_000):
        res = forward(build(q, 1_000).present(), params)
        h = hashlib.sha256(msgspec.json.encode(res)).hexdigest()[:16]
        print(f"queue={q} gpus=1000 cycles={res.cycles} estimates={len(res.estimates)} sha256 {h}")


def repeat(params: EstimateParams, n: int) -> None:
    """10k × 1k only: the fold built, then `n` estimates, untimed — for a sampler, or for an
    instruction count (`valgrind --tool=callgrind`: n=2 minus n=1 is one estimate), which the
    load of a shared machine does not move."""
    live = build(10_000, 1_000)
    for _ in range(n):
        forward(live.present(), params)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer runs")
    ap.add_argument("--max-cycles", type=int, default=EstimateParams().max_cycles)
    ap.add_argument("--growth", type=float, default=EstimateParams().growth)
    ap.add_argument("--resolution", type=float, default=EstimateParams().resolution_s)
    ap.add_argument(
        "--split", action="store_true", help="10k × 1k only: building the simulator vs the play"
    )
    ap.add_argument(
        "--digest", action="store_true", help="hash the 1k and 10k estimates (no timing)"
    )
    ap.add_argument(
        "--repeat", type=int, metavar="N", help="10k × 1k only: N estimates, untimed (profilers)"
    )
    args = ap.parse_args()
    params = EstimateParams(
        max_cycles=args.max_cycles, growth=args.growth, resolution_s=args.resolution
    )
    if args.repeat is not None:
        repeat(params, args.repeat)
        return
    if args.digest:
        digest(params)
        return
    if args.split:
        split(params, 3 if args.quick else 5)
        return
    runs = 3 if args.quick else 5
    print(
        f"{'queue':>6} {'gpus':>5} | {'estimate cpu s: med':>19} {'max':>6} | {'cycle ms':>8} |"
        f" {'ratio':>6} | {'cycles':>6} {'reached h':>9} {'started':>8} {'unknown':>8}"
    )
    for q, g in ((1_000, 1_000), (10_000, 1_000)):
        print(f"building queue={q} gpus={g} …", file=sys.stderr)
        live = build(q, g)
        snap = Snapshot(
            tiers=TIERS, gpus=gpus(live.state), queue=live.state.queue, usage=live.state.usage
        )
        _, ccpu = timed(lambda s=snap, t=live.now: cycle(s, t), 11)
        res = forward(live.present(), params)
        # one estimate: the Present taken from the fold, then the forward from it
        _, cpu = timed(lambda v=live: forward(v.present(), params), runs)
        unknown = sum(1 for e in res.estimates.values() if e.start is None)
        med, cmed = statistics.median(cpu), statistics.median(ccpu)
        print(
            f"{q:>6} {g:>5} | {med:>19.3f} {max(cpu):>6.3f} | {cmed * 1e3:>8.2f} |"
            f" {med / cmed:>6.0f} | {res.cycles:>6} {(res.reached - live.now) / H:>9.1f}"
            f" {len(res.estimates) - unknown:>8} {unknown:>8}"
        )
    print(f"params: {params}", file=sys.stderr)
    t = time.process_time()
    print(f"total process CPU {t:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
