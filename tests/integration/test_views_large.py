"""SPEC D1, D7, U4 at any queue length: the dispatcher's queue view and estimates reach the
gateway whole through the `jpu_views` KV bucket (jpu.bus.views), on a real JetStream.

One KV value is one message (1 MiB by NATS's default `max_payload`): a view of ~15,000 queued
jobs did not fit, every put failed, and the API showed no rank for anyone."""

from __future__ import annotations

import asyncio
import random
import uuid

from jpu.bus import EventBus
from jpu.bus.views import LargeValue, ViewStore
from jpu.commands import EstimatesView, QueueView, encode_estimates, encode_view
from jpu_services.dispatcher.view import ViewPublisher

REASONS = ("Priority", "Resources", "Reservation")


def _ids(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [uuid.UUID(int=rng.getrandbits(128)).hex[:24] for _ in range(n)]


async def test_D1_D7_U4_views_of_60000_queued_jobs_reach_the_gateway(bus: EventBus) -> None:
    ids = _ids(60_000, 1)
    rng = random.Random(2)
    queue = QueueView(
        at=1_700_000_000.5, seq=987_654, order=ids, pending={j: rng.choice(REASONS) for j in ids}
    )
    est = EstimatesView(
        at=1_700_000_000.5,
        seq=987_654,
        jobs={j: (1_700_000_000.0 + 60 * i, "limits") for i, j in enumerate(ids)},
        complete=False,
    )
    # the case that failed: each one is larger than one message may be
    assert len(encode_view(queue)) > bus.nc.max_payload
    assert len(encode_estimates(est)) > bus.nc.max_payload

    publisher = ViewPublisher(bus)
    await publisher.publish(queue.at, queue.seq, queue.order, queue.pending)
    await publisher.publish_estimates(est)

    reader = ViewStore(bus)  # the gateway's
    assert await reader.queue() == queue
    assert await reader.estimates() == est

    # a shorter view after a longer one: the reader gets the shorter one, not leftover parts
    short = QueueView(
        at=queue.at + 5, seq=queue.seq + 1, order=ids[:3], pending={ids[0]: "Priority"}
    )
    await publisher.publish(short.at, short.seq, short.order, short.pending)
    assert await reader.queue() == short


async def test_D7_a_reader_never_decodes_a_mix_of_two_views(bus: EventBus) -> None:
    """Two writers (a dispatcher failover overlap) put values of many parts back to back while
    readers read: every read is one whole value that was put, never parts of two. (Without the
    generation and CRC checks a read here decodes parts of two values: zlib fails or a value
    never put comes out.)"""
    kv = await bus.js.create_key_value(bucket="jpu_views_race", history=1)
    values = [bytes(random.Random(k).randbytes(20_000)) for k in range(12)]
    written: set[bytes] = set()
    stop = asyncio.Event()
    reads: list[bytes | None] = []

    async def write(first: int) -> None:
        w = LargeValue(kv, "race", part_size=1024)  # ~20 parts each (random bytes: no zip gain)
        rng = random.Random(first)
        for k in range(first, 400, 2):
            await asyncio.sleep(rng.random() * 0.02)  # drift: the two writers' puts overlap
            v = values[k % len(values)]
            written.add(v)
            await w.put(v)
        stop.set()

    async def read() -> None:
        r = LargeValue(kv, "race", part_size=1024)
        while not stop.is_set():
            reads.append(await r.get(attempts=2))

    await asyncio.gather(write(0), write(1), read(), read(), read())
    got = [v for v in reads if v is not None]
    assert len(got) >= 10, f"{len(got)} of {len(reads)} reads returned a value"
    assert all(v in written for v in got)
    # both writers' values were seen: the reads really overlapped the puts
    assert len(set(got)) > 1
