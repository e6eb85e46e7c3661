"""The bus on a 3-node JetStream cluster (stream replicated 3×): losing one node of three is a
leader election, not an outage (SPEC E2, O3, O5). Each test starts its own cluster."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable

import pytest
import pytest_asyncio

from jpu.bus import ConcurrencyConflict, EventBus
from jpu.bus.ordered import follow_ordered
from jpu.events import encode
from jpu.testing.nats_cluster import NatsCluster, stream_leader, wait_jetstream
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.sample_events import promoted, submitted
from jpu_services.dispatcher.lease import BUCKET as LEASE_BUCKET
from jpu_services.dispatcher.lease import Lease

pytestmark = pytest.mark.timeout(120)


@pytest_asyncio.fixture
async def cbus(nats_cluster: NatsCluster) -> AsyncIterator[EventBus]:
    await wait_jetstream(nats_cluster.urls)
    stream, prefix = unique_names()
    bus = await EventBus.connect(nats_cluster.urls, stream=stream, prefix=prefix, replicas=3)
    try:
        await bus.ensure_stream()
        yield bus
    finally:
        await bus.close()


async def test_E2_conflict_on_a_replicated_stream_is_a_concurrency_conflict(cbus: EventBus):
    """A clustered leader answers a failed expected-last-subject-sequence check with 10071, or,
    while an earlier append to the subject is still being replicated, with 10164 ("wrong last
    sequence"): both are the E2 conflict, so concurrent writers see one win and the rest lose."""
    seq = await cbus.append(submitted("j1"), expected_last_subject_seq=0)
    for _ in range(5):
        results = await asyncio.gather(
            *(cbus.append(promoted("j1"), expected_last_subject_seq=seq) for _ in range(8)),
            return_exceptions=True,
        )
        wins = [r for r in results if isinstance(r, int)]
        others = [r for r in results if not isinstance(r, int | ConcurrencyConflict)]
        assert len(wins) == 1 and not others, results
        seq = wins[0]


async def test_O3_append_rides_out_the_stream_leader_loss(
    cbus: EventBus, nats_cluster: NatsCluster
):
    """SIGKILL the node leading the stream: a plain `append` (no caller retry) is accepted by the
    new leader, once, within a few seconds."""
    await cbus.append(submitted("j0"), expected_last_subject_seq=0)
    leader = await stream_leader(cbus.js, cbus.stream)
    nats_cluster.kill(leader)
    t0 = time.monotonic()
    seq = await cbus.append(submitted("j1"), expected_last_subject_seq=0)
    took = time.monotonic() - t0
    trail = await cbus.job_events("j1")
    assert [d.seq for d in trail] == [seq]
    assert await stream_leader(cbus.js, cbus.stream) != leader
    assert took < 10.0, f"first append after the leader's loss took {took:.1f} s"
    nats_cluster.node(leader).start()


async def test_O5_ordered_reader_follows_across_the_stream_leader_loss(
    cbus: EventBus, nats_cluster: NatsCluster
):
    """The ordered reader's consumer lives on one node; when that node (here also the stream's
    leader) dies the reader resubscribes on a live one at once, misses nothing, and hands out
    the first append after the loss soon after it is accepted (it used to wait 10 s for the
    dead consumer's deletion first)."""
    stop = asyncio.Event()
    seen: list[int] = []
    got = asyncio.Event()

    async def follow() -> None:
        async for msgs in follow_ordered(cbus.js, cbus.stream, f"{cbus.prefix}.>", 1, stop):
            seen.extend(m.metadata.sequence.stream for m in msgs)
            got.set()

    reader = asyncio.create_task(follow())
    try:
        first = await cbus.append(submitted("j0"), expected_last_subject_seq=0)
        await asyncio.wait_for(got.wait(), 10)
        [consumer] = await cbus.js.consumers_info(cbus.stream)
        assert consumer.cluster is not None and consumer.cluster.leader
        await _lead_from(cbus, str(consumer.cluster.leader))
        nats_cluster.kill(consumer.cluster.leader)
        second = await cbus.append(submitted("j1"), expected_last_subject_seq=0)
        t_appended = time.monotonic()
        async with asyncio.timeout(20):
            while second not in seen:
                await asyncio.sleep(0.05)
        lag = time.monotonic() - t_appended
        assert seen == [first, second]
        assert lag < 4.0, f"the reader handed out the append {lag:.1f} s after it was accepted"
    finally:
        stop.set()
        await asyncio.wait_for(reader, 10)


async def _lead_from(bus: EventBus, node: str) -> None:
    """Move the stream's leadership to `node` (a leader step-down until it lands there)."""
    for _ in range(20):
        if await stream_leader(bus.js, bus.stream) == node:
            return
        with contextlib.suppress(Exception):
            await bus.nc.request(f"$JS.API.STREAM.LEADER.STEPDOWN.{bus.stream}", b"", timeout=2)
        await asyncio.sleep(0.5)
    raise AssertionError(f"could not move the stream's leadership to {node}")


async def test_O3_lease_bucket_is_replicated_and_renews_across_its_leader_loss(
    cbus: EventBus, nats_cluster: NatsCluster, monkeypatch: pytest.MonkeyPatch
):
    """The dispatcher's lease (a KV bucket) has as many copies as the stream: losing the node
    that leads it, the holder renews the same lease on the new leader within its TTL."""
    monkeypatch.setenv("JPU_STREAM_REPLICAS", "3")
    lease = Lease(cbus.js, f"dispatcher-{cbus.stream}", ttl_s=10.0)
    assert await lease.step()
    bucket = f"KV_{LEASE_BUCKET}"
    assert (await cbus.js.stream_info(bucket)).config.num_replicas == 3
    nats_cluster.kill(await stream_leader(cbus.js, bucket))
    t0 = time.monotonic()
    while not await lease.step():
        assert time.monotonic() - t0 < 8.0, "the lease was lost with one node of three"
        await asyncio.sleep(0.2)


async def test_O3_reading_a_job_rides_out_the_stream_leader_loss(
    cbus: EventBus, nats_cluster: NatsCluster
):
    """Intake reads a job's subject for every submit with an Idempotency-Key (Q6): right after
    the stream leader's loss that read waits for the new leader instead of failing."""
    seq = await cbus.append(submitted("j0"), expected_last_subject_seq=0)
    nats_cluster.kill(await stream_leader(cbus.js, cbus.stream))
    assert [d.seq for d in await cbus.job_events("j0")] == [seq]


FOLLOW_BUS_S = 1.0  # the aim is 0.5 s (bench/bench_failover.py --platform); slack for a loaded CI


async def _first_raw_ack(bus: EventBus, t0: float) -> float:
    """The bus's own time: one event published raw every 0.05 s (same msg id, earlier tries left
    out, no pacing of ours) until the first acknowledgement; seconds from `t0`."""
    event = submitted("raw-probe")
    headers = {"Nats-Msg-Id": event.event_id}
    tries: set[asyncio.Task[object]] = set()
    try:
        while time.monotonic() - t0 < 30:
            tries.add(
                asyncio.create_task(
                    bus.js.publish(
                        f"{bus.prefix}.job.raw-probe",
                        encode(event),
                        headers=headers,
                        stream=bus.stream,
                        timeout=1.0,
                    )
                )
            )
            done, _ = await asyncio.wait(tries, timeout=0.05)
            tries -= done
            if any(t.exception() is None for t in done):
                return time.monotonic() - t0
        raise AssertionError("no leader within 30 s")
    finally:
        for t in tries:
            t.cancel()
        await asyncio.gather(*tries, return_exceptions=True)


async def test_O3_requests_begun_mid_election_follow_the_new_leader_at_once(
    cbus: EventBus, nats_cluster: NatsCluster
):
    """A request sent while no leader answers is dropped, not kept for the new leader: the bus
    client must not wait for it a whole request timeout (the dispatcher's catch-up read of the
    stream's state waited the 10 s JetStream API timeout, the gateway's lookup before a submit
    likewise). A stream-state read, a last-message read and an append, each begun mid-election
    on a connection that saw nothing wrong yet, answer within FOLLOW_BUS_S of the bus's own
    first acknowledgement."""
    await cbus.append(submitted("j0"), expected_last_subject_seq=0)
    leader = await stream_leader(cbus.js, cbus.stream)
    survivors = ",".join(n.url for name, n in nats_cluster.nodes.items() if name != leader)
    fresh = await EventBus.connect(survivors, stream=cbus.stream, prefix=cbus.prefix)
    try:
        nats_cluster.kill(leader)
        t0 = time.monotonic()
        bus_at = asyncio.create_task(_first_raw_ack(cbus, t0))
        await asyncio.sleep(2.5)  # mid-election: nats-server's takes 4 s at the least

        async def timed(call: Awaitable[object]) -> float:
            await call
            return time.monotonic() - t0

        took = await asyncio.gather(
            timed(fresh.last_seq()),
            timed(fresh.last_message(f"{cbus.prefix}.job.j0")),
            timed(fresh.append(submitted("j1"), expected_last_subject_seq=0)),
        )
        first = await bus_at
    finally:
        await fresh.close()
    late = [round(t - first, 2) for t in took]
    assert first > 2.5, f"the election ended before the requests began ({first:.2f} s)"
    assert max(late) <= FOLLOW_BUS_S, f"after the bus's first ack at {first:.2f} s: {late}"
    assert [d.event.job_id for d in await cbus.job_events("j1")] == ["j1"]  # stored once
    nats_cluster.node(leader).start()
