"""Start time of a service's fold against a long log: snapshot + tail vs full replay (SPEC O6).

    python bench/bench_start.py [--n 100000] [--tail 1000] [--profile FILE] [--live N]

Starts its own NATS. Appends n events (the job-lifecycle mix of jpu.testing.pg_fixtures, its
charges carrying the ids accounting writes: as_accounting_writes), then
measures, each in a fresh process (so RSS is the process's own), in the same run:
  reference  a raw ordered read of the whole stream (jpu.bus.ordered, decode only);
  full       a ClusterState (services' bounded mode) replayed from seq 1, no snapshot;
  snapshot   the same after a snapshot written at n, with `tail` more events appended after it.
Each time runs from the process's first line (imports included) to caught up (ready); the
snapshot line also shows the time to the reader's clean stop. `--live N` measures only a fold
following live instead: a fresh stream, N events appended by this process while it follows.
Results on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from jpu.bus import EventBus
from jpu.bus.fold_follow import Follower
from jpu.bus.snapshots import SnapshotStore
from jpu.config import load_config
from jpu.domain.cluster import ClusterState
from jpu.embedded.nats import EmbeddedNats
from jpu.events import AnyEvent, UsageCharged
from jpu.policy.charging import charge_id
from jpu.testing.pg_fixtures import sample_log

START = r"""
import asyncio, json, sys, time
t0 = time.perf_counter()
from jpu.bus import EventBus
from jpu.bus.ordered import follow_ordered
from jpu.bus.snapshots import SnapshotStore
from jpu.config import load_config
from jpu.events import decode
from jpu.domain.cluster import ClusterState
from jpu.bus.fold_follow import Follower, SnapshotPolicy

async def main(url, mode):
    config = load_config(env={})
    if mode == "live":
        return await live(url, config)
    bus = await EventBus.connect(url, stream="BENCH", prefix="bench")
    last = await bus.last_seq()
    if mode == "raw":
        stop, n = asyncio.Event(), 0
        async for msgs in follow_ordered(bus.js, "BENCH", "bench.>", 1, stop):
            for m in msgs:
                decode(m.data)
            n = msgs[-1].metadata.sequence.stream
            if n >= last:
                stop.set()
        restored = 0
        ready = time.perf_counter() - t0
    else:
        state = ClusterState.new(config, keep_ended=False)
        policy = None
        if mode == "snapshot":
            policy = SnapshotPolicy(SnapshotStore(bus.js, "BENCH"), config, 10**9, 10**9)
        f = Follower(bus, state, snapshots=policy)
        restored = await f.restore()
        stop = asyncio.Event()
        task = asyncio.create_task(f.run(stop))
        await f.catch_up()
        ready = time.perf_counter() - t0  # the service's readiness line would come here
        stop.set()
        await task
    dt = time.perf_counter() - t0
    # VmHWM: this process's own peak (ru_maxrss would carry the parent's over fork + exec)
    hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0]
    rss = int(hwm.split()[1]) / 1024
    print(json.dumps({"mode": mode, "seconds": ready, "exit_s": dt, "rss_mb": rss, "events": last,
                      "restored_from": restored}))
    await bus.close()

async def live(url, config):  # a fold following a fresh stream while the parent appends
    import os
    n = int(os.environ["JPU_BENCH_LIVE_N"])
    bus = await EventBus.connect(url, stream="LIVE", prefix="live")
    first = []
    f = Follower(bus, ClusterState.new(config, keep_ended=False),
                 on_event=lambda d: first or first.append(time.perf_counter()))
    stop = asyncio.Event()
    task = asyncio.create_task(f.run(stop))
    print("following", flush=True)
    await f.wait_for(n, timeout=600)
    dt = time.perf_counter() - first[0]
    print(json.dumps({"mode": "live", "seconds": dt, "done_at": time.time(), "events": n}))
    stop.set()
    await task
    await bus.close()

if len(sys.argv) > 3:  # a profile of the start (bench_start.py --profile FILE)
    import cProfile
    cProfile.run("asyncio.run(main(*sys.argv[1:3]))", sys.argv[3])
else:
    asyncio.run(main(*sys.argv[1:]))
"""


def as_accounting_writes(log: list[AnyEvent]) -> list[AnyEvent]:
    """sample_log's charges get the id accounting gives them (`chg-<source event id>`, the
    source being the event just before each charge there), so they settle what the fold owes,
    as on a real platform; with random ids every charge stayed owed and the snapshot carried
    all of them."""
    out = list(log)
    for i, e in enumerate(out):
        if isinstance(e, UsageCharged) and i > 0:
            out[i] = msgspec.structs.replace(e, event_id=charge_id(out[i - 1].event_id))
    return out


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def run_live(url: str, n: int, cwd: Path) -> tuple[dict, float, float]:
    """The live path: a fold in its own process follows while this one appends n events as
    fast as it can (batches of 1,000); returns its result, the append's rate and end time."""
    bus = await EventBus.connect(url, stream="LIVE", prefix="live")
    await bus.ensure_stream()
    log = as_accounting_writes(sample_log(n // 6 + 10)[:n])
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-c", START, url, "live", cwd=cwd, stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "JPU_BENCH_LIVE_N": str(n)},
    )  # fmt: skip
    assert proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"following"
    await asyncio.sleep(1.0)  # its consumer is up
    t = time.perf_counter()
    for i in range(0, n, 1000):
        await bus.append_many(log[i : i + 1000])
    rate, ended = n / (time.perf_counter() - t), time.time()
    out, _ = await proc.communicate()
    await bus.close()
    return json.loads(out.decode().strip().splitlines()[-1]), rate, ended


def run_start(url: str, mode: str, cwd: Path, profile: str | None = None) -> dict:
    out = subprocess.run(
        [sys.executable, "-P", "-c", START, url, mode, *([profile] if profile else [])],
        capture_output=True, text=True, check=True, cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


async def prepare(url: str, n: int, tail: int) -> tuple[int, int]:
    bus = await EventBus.connect(url, stream="BENCH", prefix="bench")
    await bus.ensure_stream()
    log = as_accounting_writes(sample_log((n + tail) // 6 + 10)[: n + tail])
    t = time.perf_counter()
    for i in range(0, n, 1000):
        await bus.append_many(log[i : min(i + 1000, n)])
    progress(f"appended {n} events in {time.perf_counter() - t:.1f} s")
    config = load_config(env={})
    state = ClusterState.new(config, keep_ended=False)
    f = Follower(bus, state)
    stop = asyncio.Event()
    task = asyncio.create_task(f.run(stop))
    await f.catch_up()
    stop.set()
    await task
    t = time.perf_counter()
    header = await SnapshotStore(bus.js, "BENCH").save(state)
    progress(
        f"snapshot at seq {header.seq}: {header.size:,} bytes in {time.perf_counter() - t:.2f} s"
    )
    if tail:
        await bus.append_many(log[n:])
    size = header.size
    await bus.close()
    return len(state.jobs), size


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="jpu-bench-start-"))
    nats = EmbeddedNats(root / "nats")
    try:
        url = nats.start()
        if args.live:
            res, rate, ended = await run_live(url, args.live, root)
            print(f"live: {args.live:,} events appended at {rate:,.0f} events/s; the fold "
                  f"followed at {args.live / res['seconds']:,.0f} events/s, done "
                  f"{res['done_at'] - ended:.2f} s after the last append")  # fmt: skip
            return
        in_flight, size = await prepare(url, args.n, args.tail)
        if args.profile:
            snap = run_start(url, "snapshot", root, str(Path(args.profile).resolve()))
            print(
                f"snapshot + tail start under cProfile: {snap['seconds']:.2f} s -> {args.profile}"
            )
            return
        results = {m: run_start(url, m, root) for m in ("raw", "full", "snapshot")}
        raw, full, snap = results["raw"], results["full"], results["snapshot"]
        n = full["events"]
        print(f"log: {n:,} events; jobs in flight at the snapshot: {in_flight}; "
              f"snapshot {size:,} bytes; tail {args.tail} events")  # fmt: skip
        print(f"reference raw ordered read: {raw['seconds']:6.2f} s  {n / raw['seconds']:>9,.0f} "
              f"events/s  RSS {raw['rss_mb']:.0f} MB")  # fmt: skip
        print(f"full replay start:          {full['seconds']:6.2f} s  {n / full['seconds']:>9,.0f} "
              f"events/s  RSS {full['rss_mb']:.0f} MB")  # fmt: skip
        print(f"snapshot + tail start:      {snap['seconds']:6.2f} s  (from seq "
              f"{snap['restored_from']:,}; stopped at {snap['exit_s']:.2f} s)  "
              f"RSS {snap['rss_mb']:.0f} MB  "
              f"= {snap['seconds'] / full['seconds']:.3f} of the full replay")  # fmt: skip
    finally:
        nats.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--tail", type=int, default=1_000)
    ap.add_argument("--live", type=int, default=0, help="only the live path, with N events")
    ap.add_argument("--profile", help="only the snapshot start, under cProfile, stats to this file")
    asyncio.run(main(ap.parse_args()))
