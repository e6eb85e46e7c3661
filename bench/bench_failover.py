"""Stream-leader loss on a 3-node JetStream cluster: how long until the next append is accepted.

    python bench/bench_failover.py [--rounds 5]

A 3-node cluster from the project's nats-server, the event stream with 3 replicas. Each round:
SIGKILL the node leading the stream (or, with --stop, stop it with SIGTERM), then time one plain
`EventBus.append` (it resends while no leader answers, SPEC O3) until it is accepted, and the
time until an ordered reader (jpu.bus.ordered, what every service's fold and the projections use)
hands that event out; restart the node on its store and wait until it is a current replica again.
Prints each round, the medians and the maxima.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from jpu.bus import EventBus
from jpu.bus.ordered import follow_ordered
from jpu.events import JobPromoted, new_event_id
from jpu.testing.nats_cluster import NatsCluster, stream_leader, wait_jetstream


def promoted(i: int) -> JobPromoted:
    return JobPromoted(
        event_id=new_event_id(), ts=float(i), job_id=f"job-{i}", queue_entered_at=1.0
    )


async def current(bus: EventBus, node: str) -> None:
    while True:
        try:
            info = await bus.js.stream_info(bus.stream)
            if any(
                p.name == node and p.current for p in (info.cluster and info.cluster.replicas) or []
            ):
                return
        except Exception:
            pass
        await asyncio.sleep(0.2)


async def run(rounds: int, graceful: bool) -> list[tuple[float, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = NatsCluster(Path(tmp))
        cluster.start()
        try:
            await wait_jetstream(cluster.urls)
            bus = await EventBus.connect(cluster.urls, stream="BENCH", prefix="bench", replicas=3)
            await bus.ensure_stream()
            seen: dict[int, float] = {}
            stop = asyncio.Event()

            async def follow() -> None:
                async for msgs in follow_ordered(bus.js, bus.stream, "bench.>", 1, stop):
                    for m in msgs:
                        seen[m.metadata.sequence.stream] = time.monotonic()

            reader = asyncio.create_task(follow())
            took: list[tuple[float, float]] = []
            for i in range(rounds):
                await bus.append(promoted(i))
                node = await stream_leader(bus.js, bus.stream)
                if graceful:
                    await asyncio.to_thread(cluster.node(node).stop)
                else:
                    await asyncio.to_thread(cluster.kill, node)
                t0 = time.monotonic()
                seq = await bus.append(promoted(1000 + i))
                appended = time.monotonic() - t0
                while seq not in seen:
                    await asyncio.sleep(0.02)
                took.append((appended, seen[seq] - t0))
                print(
                    f"round {i + 1}: leader {node} lost -> append accepted in {appended:.2f} s, "
                    f"read by an ordered reader in {took[-1][1]:.2f} s"
                )
                await asyncio.to_thread(cluster.node(node).start)
                await asyncio.wait_for(current(bus, node), 60)
            stop.set()
            await reader
            await bus.close()
            return took
        finally:
            cluster.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--stop", action="store_true", help="SIGTERM instead of SIGKILL")
    args = parser.parse_args()
    took = asyncio.run(run(args.rounds, args.stop))
    how = "stopped (SIGTERM)" if args.stop else "SIGKILLed"
    for k, what in enumerate(("next append accepted", "read by an ordered reader")):
        xs = [t[k] for t in took]
        print(
            f"stream leader {how} -> {what}: median {statistics.median(xs):.2f} s, "
            f"max {max(xs):.2f} s ({len(xs)} rounds)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
