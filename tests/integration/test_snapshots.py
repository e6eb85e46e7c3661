"""SPEC O6 on a real JetStream: services start from the newest valid snapshot of their fold and
replay only the tail; damaged, foreign or too-new snapshots are skipped; a writer killed in the
middle of a snapshot never leaves one a reader would take."""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import sys

import msgspec
import pytest

from jpu.bus import Delivered, EventBus
from jpu.bus.fold_follow import Follower, SnapshotPolicy
from jpu.bus.snapshots import SnapshotStore
from jpu.config import load_config
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.codec import pack, unpack
from jpu.testing.pg_fixtures import sample_log

CONFIG = load_config(env={})


async def _full(bus: EventBus) -> ClusterState:
    state = ClusterState.new(CONFIG)
    async for d in bus.replay():
        evolve(state, d)
    return state


async def _follow_until(bus: EventBus, follower: Follower, seq: int) -> None:
    stop = asyncio.Event()
    task = asyncio.create_task(follower.run(stop))
    try:
        await follower.wait_for(seq, timeout=30)
    finally:
        stop.set()
        await task


async def test_E3_a_start_restores_the_newest_snapshot_and_replays_only_the_tail(
    bus: EventBus,
) -> None:
    log = sample_log(60)
    seqs = await bus.append_many(log[: len(log) // 2])
    store = SnapshotStore(bus.js, bus.stream, keep=2)
    policy = SnapshotPolicy(store, CONFIG, every_events=40, every_s=3600)
    writer = Follower(bus, ClusterState.new(CONFIG), snapshots=policy)
    await _follow_until(bus, writer, seqs[-1])
    written = await store.seqs()
    assert written and len(written) <= 2  # keep = 2
    seqs += await bus.append_many(log[len(log) // 2 :])

    seen: list[Delivered] = []
    state = ClusterState.new(CONFIG)
    reader = Follower(bus, state, seen.append, snapshots=policy)
    assert await reader.restore() == written[0]
    await _follow_until(bus, reader, seqs[-1])
    assert seen[0].seq == written[0] + 1  # only the tail was replayed
    assert state == await _full(bus)


async def test_E3_damaged_foreign_and_ahead_snapshots_are_skipped_with_a_warning(
    bus: EventBus, caplog: pytest.LogCaptureFixture
) -> None:
    seqs = await bus.append_many(sample_log(20))
    store = SnapshotStore(bus.js, bus.stream, keep=10)
    good = ClusterState.new(CONFIG)
    async for d in bus.replay():
        if d.seq > seqs[10]:
            break
        evolve(good, d)
    await store.save(good)
    newer = await _full(bus)
    frame = pack(newer, bus.stream, 1.0)
    await store.put(frame[:-7], seqs[-2])  # truncated: a writer that died mid-write
    head, _, payload = frame.partition(b"\n")[2].partition(b"\n")
    other = msgspec.json.decode(head)
    other["schema"] += 1
    await store.put(b"JPUSNAP\n" + msgspec.json.encode(other) + b"\n" + payload, seqs[-1])
    await store.put(frame, seqs[-1] + 1000)  # ahead of the stream (e.g. a recreated stream)

    state = ClusterState.new(CONFIG)
    follower = Follower(bus, state, snapshots=SnapshotPolicy(store, CONFIG))
    with caplog.at_level(logging.WARNING, logger="jpu.bus.snapshots"):
        assert await follower.restore() == seqs[10]
    text = caplog.text
    assert "ahead of the stream" in text and "schema version" in text and "checksum" in text
    await _follow_until(bus, follower, seqs[-1])
    assert state == await _full(bus)


async def test_E3_no_usable_snapshot_means_a_full_replay(bus: EventBus) -> None:
    seqs = await bus.append_many(sample_log(5))
    store = SnapshotStore(bus.js, bus.stream)
    await store.put(b"JPUSNAP\nnot json\n", seqs[-1])
    state = ClusterState.new(CONFIG)
    follower = Follower(bus, state, snapshots=SnapshotPolicy(store, CONFIG))
    assert await follower.restore() == 0
    await _follow_until(bus, follower, seqs[-1])
    assert state == await _full(bus)


WRITER = """
import asyncio, sys
from jpu.bus import EventBus
from jpu.bus.snapshots import SnapshotStore
from jpu.config import load_config
from jpu.domain.cluster import ClusterState, evolve

async def main(url, stream, prefix):
    bus = await EventBus.connect(url, stream=stream, prefix=prefix)
    store = SnapshotStore(bus.js, stream, keep=50)
    state = ClusterState.new(load_config(env={}))
    async for d in bus.replay():
        evolve(state, d)
        if d.seq % 400 == 0:
            print("SAVING", d.seq, flush=True)
            await store.save(state)
    print("DONE", flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


async def test_E3_a_writer_killed_mid_snapshot_leaves_nothing_a_reader_takes(
    bus: EventBus, nats_url: str
) -> None:
    seqs = await bus.append_many(sample_log(700))  # a few MB of state: puts take a while
    rng = random.Random(11)
    for _ in range(4):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-P", "-c", WRITER, nats_url, bus.stream, bus.prefix,
            stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        assert proc.stdout is not None
        for _ in range(rng.randint(1, 4)):
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if not line.startswith(b"SAVING"):
                break
        await asyncio.sleep(rng.uniform(0.0, 0.05))  # inside the put, most of the time
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

    store = SnapshotStore(bus.js, bus.stream)
    listed = await store.seqs()
    assert listed  # some complete snapshots exist, and every listed one is whole
    bucket = await store._bucket()
    for seq in listed:
        data = (await bucket.get(f"{bus.stream}.state.{seq:015d}")).data
        assert unpack(data, CONFIG)[0].seq == seq
    state = ClusterState.new(CONFIG)
    follower = Follower(bus, state, snapshots=SnapshotPolicy(store, CONFIG))
    assert await follower.restore() > 0
    await _follow_until(bus, follower, seqs[-1])
    assert state == await _full(bus)


async def test_E3_a_put_keeps_the_newest_and_the_first_of_the_hour(bus: EventBus) -> None:
    """The thinning history on the real object store (times are the objects' own mtime)."""
    from jpu.bus.snapshots import HOUR

    seqs = await bus.append_many(sample_log(5))
    store = SnapshotStore(bus.js, bus.stream, keep=1, history=((HOUR, 24),))
    state = await _full(bus)
    for seq in seqs[-4:]:
        await store.put(pack(state, bus.stream, 0.0), seq)
    kept = await store.seqs()
    # the newest, and the first of this hour (the oldest, unless the hour turned meanwhile)
    assert kept[0] == seqs[-1] and len(kept) == 2 and kept[1] in seqs[-4:-1]
