"""End-to-end: zero-length jobs through the whole platform, against raw append+consume on the
same NATS server, in the same run.

    python bench/bench_e2e.py [--jobs 600] [--clients 32] [--nodes 16] [--timeout 75]
    python bench/bench_e2e.py --cluster-compare    # one server, then a 3-node R3 cluster

The stack as `make run` builds it (embedded NATS JetStream + durable PostgreSQL, prepare, the
services under the stack's supervisor): gateway (2 processes, JPU_GATEWAY_WORKERS), intake,
dispatcher, slurm-agent (local backend: each job is a real local process) and accounting;
backfill is off (JPU_BACKFILL_ENABLED=false) so idle GPUs stay free for research jobs. The
cluster is `--nodes` nodes of 8 rtx4090 each, so GPUs do not bound the rate; rate limit off,
max_active_jobs high (all six demo users submit).

`--jobs` jobs `{"command": "true", "num_gpus": 1}` are POSTed by `--clients` keep-alive clients;
an ordered consumer on the log timestamps (on arrival) each job's JobStarted (RUNNING), JobEnded
and UsageCharged. Figures: sustained jobs/s from the first submit to the last charge, and
median/p99 of submit→RUNNING and submit→charged (submit = the POST was sent).
Reference: (r) EventBus.append_many of the same number of events × 6 (about the events a job
causes) on another stream of the same server, consumed by a durable consumer: events/s
round trip, and jobs/s as events/s ÷ events per job. Progress on stderr.

--cluster-compare runs the whole measurement twice in one run: on one embedded nats-server, then
on a 3-node JetStream cluster with the event stream and every bucket replicated 3× (SPEC O3),
and prints both with the cluster's ratio to the single server (append rate, jobs/s, submit p99).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections import Counter

from stackbench import DEMO_TOKENS, BenchStack, RawClient, closed_loop, profiling, progress

from jpu.bus import Delivered, EventBus
from jpu.events import JobPromoted, decode, new_event_id

BODY = json.dumps({"name": "e2e", "command": "true", "num_gpus": 1}).encode()
SERVICES = ("gateway", "intake", "dispatcher", "slurm_agent", "accounting")
EVENTS_PER_JOB = 6  # JobSubmitted, JobPromoted, JobDispatched, JobStarted, JobEnded, UsageCharged


def overrides(nodes: int) -> dict[str, str]:
    cluster = ", ".join(f"{{name: n{i:03d}, gpus: {{rtx4090: 8}}}}" for i in range(nodes))
    return {
        "JPU_NODES": f"[{cluster}]",
        "JPU_SUBMIT_RATE_PER_S": "0",
        "JPU_MAX_ACTIVE_JOBS": "1000000",
        "JPU_BACKFILL_ENABLED": "false",
    }


class Observer:
    """Arrival time of each job's milestones, from an ordered consumer on the whole log."""

    def __init__(self) -> None:
        self.at: dict[str, dict[str, float]] = {}
        self.types: Counter[str] = Counter()

    async def run(self, bus: EventBus, stop: asyncio.Event) -> None:
        sub = await bus.js.subscribe(f"{bus.prefix}.>", ordered_consumer=True, stream=bus.stream)
        try:
            while not stop.is_set():
                try:
                    msg = await sub.next_msg(timeout=0.5)
                except TimeoutError:
                    continue
                now = time.time()
                event = decode(msg.data)
                self.types[type(event).__name__] += 1
                job_id = getattr(event, "job_id", None)
                if job_id is not None:
                    self.at.setdefault(job_id, {}).setdefault(type(event).__name__, now)
        finally:
            await sub.unsubscribe()

    def count(self, kind: str, jobs: dict[str, float]) -> int:
        return sum(1 for j in jobs if kind in self.at.get(j, {}))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] * 1000 if xs else float("nan")


async def raw_round_trip(url: str, n: int) -> float:
    """Append n events (append_many, 1,000 at a time) and consume them with a durable consumer."""
    bus = await EventBus.connect(url, stream="BENCH_E2E", prefix="bench_e2e")
    await bus.ensure_stream()
    seen = 0
    done = asyncio.Event()
    stop = asyncio.Event()

    async def handle(batch: list[Delivered]) -> None:
        nonlocal seen
        seen += len(batch)
        if seen >= n:
            done.set()

    consumer = asyncio.create_task(bus.consume("bench", handle, stop=stop, batch=512))
    t0 = time.perf_counter()
    for start in range(0, n, 1000):
        await bus.append_many(
            [
                JobPromoted(
                    event_id=new_event_id(), ts=0.0, job_id=f"j{i % 500}", queue_entered_at=0.0
                )
                for i in range(start, min(n, start + 1000))
            ]
        )
    await asyncio.wait_for(done.wait(), 60)
    rate = n / (time.perf_counter() - t0)
    stop.set()
    await consumer
    await bus.delete_stream()
    await bus.close()
    return rate


async def submit_and_drain(
    args: argparse.Namespace, stack: BenchStack, observer: Observer, t0: float
) -> tuple[float, dict[str, float]]:
    """POST the jobs, then wait (bounded) until each has its UsageCharged; (submit/s, job -> t)."""
    submitted: dict[str, float] = {}
    refused: list[str] = []  # the first few answers that were not an acceptance

    async def post(c: RawClient, i: int) -> tuple[int, bytes]:
        t = time.time()
        token = DEMO_TOKENS[i % len(DEMO_TOKENS)]
        status, body = await c.request(
            "POST", "/v1/jobs", BODY, {"Authorization": f"Bearer {token}"}
        )
        if status in (200, 201):
            submitted[json.loads(body)["id"]] = t
        elif len(refused) < 3:
            refused.append(f"{status} {body[:300]!r}")
        return status, body

    progress(f"submitting {args.jobs} jobs with {args.clients} clients ...")
    load = await closed_loop(
        stack.port,
        post,
        clients=args.clients,
        max_requests=args.jobs,
        max_seconds=args.timeout,
        label="submit",
    )
    for answer in refused:
        progress(f"  refused: {answer}")
    while time.time() < t0 + args.timeout:
        charged = observer.count("UsageCharged", submitted)
        progress(
            f"  {observer.count('JobEnded', submitted)} ended, {charged} charged"
            f" of {len(submitted)}"
        )
        if charged >= len(submitted):
            break
        await asyncio.sleep(1.0)
    return load, submitted


async def main(args: argparse.Namespace, cluster: bool = False) -> int:
    return (await measure(args, cluster)).code


class Figures:
    def __init__(self, code: int, raw: float, jobs_s: float, submit_p99_ms: float) -> None:
        self.code, self.raw, self.jobs_s, self.submit_p99_ms = code, raw, jobs_s, submit_p99_ms


async def measure(args: argparse.Namespace, cluster: bool = False) -> Figures:
    what = "3-node JetStream cluster, R3" if cluster else "one nats-server"
    progress(f"starting the stack ({', '.join(SERVICES)}; {args.nodes} nodes x 8 GPUs; {what}) ...")
    async with BenchStack(SERVICES, overrides(args.nodes), cluster=cluster) as stack:
        assert stack.config is not None
        url = stack.env["JPU_NATS_URL"]
        progress("(r) raw append_many + durable consumer on the same server ...")
        raw = await raw_round_trip(url, args.jobs * EVENTS_PER_JOB)
        bus = await EventBus.connect(
            url, stream=stack.config.stream_name, prefix=stack.config.subject_prefix
        )
        observer, stop = Observer(), asyncio.Event()
        watching = asyncio.create_task(observer.run(bus, stop))
        t0 = time.time()
        with profiling(args.profile, stack.pids(), args.timeout, "e2e"):
            load, submitted = await submit_and_drain(args, stack, observer, t0)
        stop.set()
        await watching
        await bus.close()
    print(f"== {what}")
    code, jobs_s = report(args, raw, load.rate, submitted, observer, t0)
    print(
        f"submit (POST) latency  median {load.pct(50):8.0f} ms   p99 {load.pct(99):8.0f} ms"
        f"   (n={load.ok}; errors {load.errors})"
    )
    return Figures(code, raw, jobs_s, load.pct(99))


async def compare(args: argparse.Namespace) -> int:
    one = await measure(args, cluster=False)
    three = await measure(args, cluster=True)
    print("== one nats-server vs 3-node cluster (R3), same run")
    for label, a, b, unit in (
        ("append_many + consume", one.raw, three.raw, "events/s"),
        ("end to end, submit -> charged", one.jobs_s, three.jobs_s, "jobs/s"),
        ("submit p99", one.submit_p99_ms, three.submit_p99_ms, "ms"),
    ):
        print(f"{label:<32} {a:10,.1f} -> {b:10,.1f} {unit:<9} ({b / a if a else 0:5.2f}x)")
    return one.code or three.code


MILESTONES = ("JobSubmitted", "JobPromoted", "JobDispatched", "JobStarted", "JobEnded")


def stages(submitted: dict[str, float], observer: Observer) -> None:
    """Where a job waits: median time from each milestone to the next (arrival on the log; the
    first from the POST), and the rate at which each milestone was reached (first to last): the
    stage whose rate falls below the submit rate is where the queue builds."""
    parts = []
    for before, after in zip(("POST", *MILESTONES), (*MILESTONES, "UsageCharged"), strict=True):
        gaps = [
            at[after] - (t if before == "POST" else at[before])
            for j, t in submitted.items()
            if after in (at := observer.at.get(j, {})) and (before == "POST" or before in at)
        ]
        if gaps:
            parts.append(f"{before}->{after} {statistics.median(gaps) * 1000:,.0f}")
    print(f"stage medians, ms:  {'  '.join(parts)}")
    rates = []
    for kind in (*MILESTONES, "UsageCharged"):
        ts = sorted(observer.at[j][kind] for j in submitted if kind in observer.at.get(j, {}))
        if len(ts) > 1:
            rates.append(f"{kind} {(len(ts) - 1) / max(ts[-1] - ts[0], 1e-9):,.1f}")
    print(f"milestone rates, /s: {'  '.join(rates)}")


def report(
    args: argparse.Namespace,
    raw: float,
    submit_rate: float,
    submitted: dict[str, float],
    observer: Observer,
    t0: float,
) -> tuple[int, float]:
    def lat(kind: str) -> list[float]:
        return [
            observer.at[j][kind] - t for j, t in submitted.items() if kind in observer.at.get(j, {})
        ]

    running, charged = lat("JobStarted"), lat("UsageCharged")
    ends = [observer.at[j]["UsageCharged"] for j in submitted if "UsageCharged" in observer.at[j]]
    rate = len(ends) / (max(ends) - t0) if ends else 0.0
    raw_jobs = raw / EVENTS_PER_JOB
    print(f"jobs={args.jobs} clients={args.clients} nodes={args.nodes}x8 GPUs")
    print(
        f"(r) raw append_many + consume     {raw:9,.0f} events/s = {raw_jobs:7,.0f} jobs/s  1.000x"
    )
    print(
        f"end to end, submit -> charged     {rate:9,.1f} jobs/s  {rate / raw_jobs:6.3f}x"
        f"   ({len(ends)}/{len(submitted)} charged; submits alone {submit_rate:,.0f}/s)"
    )
    print(
        f"submit -> RUNNING   median {statistics.median(running) * 1000 if running else 0:8.0f} ms"
        f"   p99 {pct(running, 99):8.0f} ms   (n={len(running)})"
    )
    print(
        f"submit -> charged   median {statistics.median(charged) * 1000 if charged else 0:8.0f} ms"
        f"   p99 {pct(charged, 99):8.0f} ms   (n={len(charged)})"
    )
    stages(submitted, observer)
    print(f"events seen: {dict(observer.types)}")
    return (0 if ends and len(ends) == len(submitted) == args.jobs else 1), rate


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=600)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--nodes", type=int, default=16, help="nodes of 8 GPUs each")
    ap.add_argument("--timeout", type=float, default=75.0, help="seconds for submit + drain")
    ap.add_argument("--profile", metavar="PY_SPY", help="py-spy binary: profile the services")
    ap.add_argument(
        "--cluster-compare", action="store_true", help="one server, then a 3-node R3 cluster"
    )
    ap.add_argument("--cluster", action="store_true", help="only the 3-node R3 cluster")
    parsed = ap.parse_args()
    run = compare(parsed) if parsed.cluster_compare else main(parsed, cluster=parsed.cluster)
    sys.exit(asyncio.run(run))
