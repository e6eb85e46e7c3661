"""Backup and restore of a whole log (jpu.tools.backup, docs/operations.md).

    python bench/bench_backup.py [--n 100000]
    python bench/bench_backup.py --events OUT/events.jsonl   # a `jpu simulate --out OUT` log

Starts its own NATS and PostgreSQL (fsync on); the log is n events of the job-lifecycle mix of
jpu.testing.pg_fixtures, or a simulator's events.jsonl (the whole Philly trace makes 612,666
events: BENCHMARKS.md "Simulator"), appended in order. Then it times `backup` to a file; stops
both servers, removes their data, starts empty ones, and times `restore` of that file: the
verification pass (checksum), the streams, and the rebuild of the projections from the restored
log. Results on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
from pathlib import Path

from jpu.bus import EventBus
from jpu.embedded.nats import EmbeddedNats
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.events import decode
from jpu.store import create_pool, migrate
from jpu.testing.pg_fixtures import sample_log
from jpu.tools.backup import backup, restore
from jpu.tools.backup_format import verify


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def fill(bus: EventBus, args: argparse.Namespace) -> int:
    t, n, chunk = time.perf_counter(), 0, []
    if args.events:
        with open(args.events, "rb") as f:
            for line in f:
                chunk.append(decode(line))
                if len(chunk) == 1000:
                    await bus.append_many(chunk)
                    n, chunk = n + len(chunk), []
    else:
        log = sample_log(args.n // 6 + 10)[: args.n]
        for i in range(0, len(log), 1000):
            await bus.append_many(log[i : i + 1000])
        n = len(log)
    if chunk:
        await bus.append_many(chunk)
        n += len(chunk)
    progress(f"appended {n:,} events in {time.perf_counter() - t:.1f} s")
    return n


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="jpu-bench-backup-"))
    root.chmod(0o755)
    file = root / "platform.jpubak"
    servers = [EmbeddedPostgres(root / "pg", durable=True), EmbeddedNats(root / "nats")]
    try:
        dsn, url = servers[0].start(), servers[1].start()
        bus = await EventBus.connect(url, stream="BENCH", prefix="bench")
        pool = await create_pool(dsn, max_size=4)
        try:
            await bus.ensure_stream()
            await migrate(pool)
            n = await fill(bus, args)
            t = time.perf_counter()
            with file.open("wb") as out:
                counts = await backup(bus, pool, out, progress)
            took_backup = time.perf_counter() - t
            last = await bus.last_seq()
        finally:
            await pool.close()
            await bus.close()
        for s in servers:
            s.stop()
        shutil.rmtree(root / "pg")
        shutil.rmtree(root / "nats")
        servers = [EmbeddedPostgres(root / "pg2", durable=True), EmbeddedNats(root / "nats2")]
        dsn, url = servers[0].start(), servers[1].start()
        bus = await EventBus.connect(url, stream="BENCH", prefix="bench")
        pool = await create_pool(dsn, max_size=4)
        marks: dict[str, float] = {}

        def mark(msg: str) -> None:
            progress(msg)
            if msg.startswith("verified"):
                marks["verified"] = time.perf_counter()
            if msg.startswith("rebuilding"):
                marks["streams"] = time.perf_counter()

        try:
            t = time.perf_counter()
            with file.open("rb") as f:
                verify(f)
            took_verify = time.perf_counter() - t
            t = time.perf_counter()
            await restore(bus, pool, file, progress=mark)
            end = time.perf_counter()
            assert await bus.last_seq() == last, "the restored stream ends elsewhere"
        finally:
            await pool.close()
            await bus.close()
        size = file.stat().st_size
        print(f"log: {n:,} events ({counts['BENCH']:,} messages backed up, last seq {last:,})")
        print(f"backup to one file: {took_backup:7.1f} s  {n / took_backup:>9,.0f} events/s  "
              f"{size / 1e6:,.0f} MB ({size / n:.0f} B/event)")  # fmt: skip
        print(f"verify alone (checksum, framing): {took_verify:7.1f} s")
        print(f"restore, whole: {end - t:7.1f} s = verify {marks['verified'] - t:.1f} s + "
              f"streams {marks['streams'] - marks['verified']:.1f} s "
              f"({n / (marks['streams'] - marks['verified']):,.0f} events/s) + "
              f"projection rebuild {end - marks['streams']:.1f} s")  # fmt: skip
    finally:
        for s in servers:
            s.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--events", help="a `jpu simulate` events.jsonl instead of --n events")
    asyncio.run(main(ap.parse_args()))
