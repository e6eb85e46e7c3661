"""Event bus throughput against raw JetStream, measured in the same run on an embedded server.

    python bench/bench_bus.py [--n 20000] [--cluster]

--cluster: the same three figures again, in the same run, on a 3-node cluster of the same
nats-server with every stream replicated 3× (SPEC O3: the deployment's `make cluster` shape).

(a) raw JetStream async publish of payloads the size of an encoded event (the reference),
(b) EventBus.append_many (msgspec encode, Nats-Msg-Id, trace headers, pipelined acks),
(c) sequential EventBus.append with the expected last subject sequence per job (SPEC E2).
Each figure is printed with its ratio to (a); progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from jpu.bus import EventBus
from jpu.embedded.nats import EmbeddedNats
from jpu.events import JobPromoted, encode, new_event_id
from jpu.testing.nats_cluster import NatsCluster, wait_jetstream


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def events(n: int, jobs: int) -> list[JobPromoted]:
    return [
        JobPromoted(
            event_id=new_event_id(),
            ts=float(i),
            job_id=f"job-{i % jobs:05d}",
            queue_entered_at=float(i),
        )
        for i in range(n)
    ]


REPLICAS = 1  # 3 for the cluster's figures


async def fresh_bus(url: str, tag: str) -> EventBus:
    bus = await EventBus.connect(
        url, stream=f"BENCH_{tag}", prefix=f"bench_{tag}", replicas=REPLICAS
    )
    await bus.ensure_stream()
    return bus


async def raw_publish(url: str, n: int, size: int) -> float:
    bus = await fresh_bus(url, "raw")
    payload = b"x" * size
    subjects = [f"bench_raw.job.job-{i % 1000:05d}" for i in range(n)]
    t0 = time.perf_counter()
    futures = [await bus.js.publish_async(s, payload) for s in subjects]
    await asyncio.gather(*futures)
    dt = time.perf_counter() - t0
    assert await bus.last_seq() == n
    await bus.delete_stream()
    await bus.close()
    return n / dt


async def bus_append_many(url: str, n: int) -> float:
    bus = await fresh_bus(url, "many")
    evs = events(n, 1000)
    t0 = time.perf_counter()
    seqs = await bus.append_many(evs)
    dt = time.perf_counter() - t0
    assert seqs[-1] == n
    await bus.delete_stream()
    await bus.close()
    return n / dt


async def bus_append_expected(url: str, n: int) -> float:
    bus = await fresh_bus(url, "seq")
    evs = events(n, 100)
    last: dict[str, int] = {}
    t0 = time.perf_counter()
    for e in evs:
        last[e.job_id] = await bus.append(e, expected_last_subject_seq=last.get(e.job_id, 0))
    dt = time.perf_counter() - t0
    await bus.delete_stream()
    await bus.close()
    return n / dt


async def figures(url: str, n: int, n_seq: int, size: int) -> tuple[float, float, float]:
    await raw_publish(url, min(n, 2000), size)  # warm-up
    progress("(a) raw JetStream publish_async ...")
    raw = await raw_publish(url, n, size)
    progress("(b) EventBus.append_many ...")
    many = await bus_append_many(url, n)
    progress("(c) EventBus.append with expected seq, sequential ...")
    seq = await bus_append_expected(url, n_seq)
    return raw, many, seq


def report(title: str, raw: float, many: float, seq: float, ref: float) -> None:
    print(title)
    print(f"(a) raw JetStream publish_async      {raw:10,.0f} msgs/s   {raw / ref:5.2f}x")
    print(f"(b) EventBus.append_many              {many:10,.0f} events/s {many / ref:5.2f}x")
    print(f"(c) EventBus.append, expected seq     {seq:10,.0f} events/s {seq / ref:5.2f}x")


async def main(n: int, n_seq: int, cluster: bool) -> None:
    global REPLICAS
    size = len(encode(events(1, 1)[0]))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedNats(Path(tmp)) as server:
        progress(f"nats-server at {server.url}; payload {size} B; n={n}, sequential n={n_seq}")
        single = await figures(server.url, n, n_seq, size)
    report("one server, 1 replica (ratios to its (a))", *single, single[0])
    if not cluster:
        return
    with tempfile.TemporaryDirectory() as tmp:
        nodes = NatsCluster(Path(tmp))
        try:
            await wait_jetstream(nodes.start())
            progress(f"3-node cluster at {nodes.urls}, streams with 3 replicas")
            REPLICAS = 3
            replicated = await figures(nodes.urls, n, n_seq, size)
        finally:
            nodes.stop()
    report("3 nodes, 3 replicas (ratios to the single server's (a))", *replicated, single[0])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="events for (a) and (b)")
    ap.add_argument("--n-seq", type=int, default=3000, help="events for (c), one ack each")
    ap.add_argument("--cluster", action="store_true", help="also on a 3-node R3 cluster")
    args = ap.parse_args()
    asyncio.run(main(args.n, args.n_seq, args.cluster))
