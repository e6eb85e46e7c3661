"""Event bus throughput against raw JetStream, measured in the same run on an embedded server.

    python bench/bench_bus.py [--n 20000]

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


async def fresh_bus(url: str, tag: str) -> EventBus:
    bus = await EventBus.connect(url, stream=f"BENCH_{tag}", prefix=f"bench_{tag}")
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


async def main(n: int, n_seq: int) -> None:
    size = len(encode(events(1, 1)[0]))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedNats(Path(tmp)) as server:
        progress(f"nats-server at {server.url}; payload {size} B; n={n}, sequential n={n_seq}")
        await raw_publish(server.url, min(n, 2000), size)  # warm-up
        progress("(a) raw JetStream publish_async ...")
        raw = await raw_publish(server.url, n, size)
        progress("(b) EventBus.append_many ...")
        many = await bus_append_many(server.url, n)
        progress("(c) EventBus.append with expected seq, sequential ...")
        seq = await bus_append_expected(server.url, n_seq)
    print(f"(a) raw JetStream publish_async      {raw:10,.0f} msgs/s   1.00x")
    print(f"(b) EventBus.append_many              {many:10,.0f} events/s {many / raw:5.2f}x")
    print(f"(c) EventBus.append, expected seq     {seq:10,.0f} events/s {seq / raw:5.2f}x")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="events for (a) and (b)")
    ap.add_argument("--n-seq", type=int, default=3000, help="events for (c), one ack each")
    args = ap.parse_args()
    asyncio.run(main(args.n, args.n_seq))
