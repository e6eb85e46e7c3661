"""The audit replay (SPEC E6, "the audit replay of 1M events in ≤ 60 s").

    python bench/bench_audit.py [--n 1000000] [--profile FILE]

Starts its own PostgreSQL (fsync on) and NATS, appends n events (the job-lifecycle mix of
jpu.testing.pg_fixtures), brings the live projections to the log's end (rebuild_many into the
live database: the reference, the rebuild alone), then runs `python -m jpu.tools.replay` in its own
process — a scratch database rebuilt from seq 1, every table compared with the live one — and
times it from the process's start to its verdict. `--profile FILE`: the replay under cProfile.
Results on stdout, progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jpu.bus import EventBus
from jpu.embedded.nats import EmbeddedNats
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.store import create_pool, migrate
from jpu.store.projections import ALL
from jpu.store.rebuilding import rebuild_many
from jpu.testing.pg_fixtures import sample_log


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def prepare(url: str, dsn: str, n: int) -> float:
    """The log and the live projections at its end; returns the live rebuild's seconds."""
    bus = await EventBus.connect(url, stream="BENCH", prefix="bench")
    await bus.ensure_stream()
    log = sample_log(n // 6 + 10)[:n]
    t = time.perf_counter()
    for i in range(0, n, 1000):
        await bus.append_many(log[i : i + 1000])
    progress(f"appended {n:,} events in {time.perf_counter() - t:.1f} s")
    del log
    pool = await create_pool(dsn, max_size=4)
    try:
        await migrate(pool)
        t = time.perf_counter()
        await rebuild_many(bus, pool, ALL)
        return time.perf_counter() - t
    finally:
        await pool.close()
        await bus.close()


def run_replay(url: str, dsn: str, cwd: Path, profile: str | None) -> tuple[float, str]:
    prof = ["-m", "cProfile", "-o", profile] if profile else []
    args = ["-m", "jpu.tools.replay", "--nats", url, "--db", dsn, "--stream", "BENCH"]
    t = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-P", *prof, *args, "--prefix", "bench"],
        capture_output=True, text=True, cwd=cwd,
    )  # fmt: skip
    took = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"jpu.tools.replay failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return took, out.stdout.strip().splitlines()[-1]


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="jpu-bench-audit-"))
    root.chmod(0o755)
    pg, nats = EmbeddedPostgres(root / "pg", durable=True), EmbeddedNats(root / "nats")
    try:
        dsn, url = pg.start(), nats.start()
        rebuilt = await prepare(url, dsn, args.n)
        progress(f"live projections rebuilt in {rebuilt:.1f} s; running jpu.tools.replay ...")
        took, verdict = run_replay(url, dsn, root, args.profile)
        print(f"log: {args.n:,} events")
        print(f"reference rebuild_many(all {len(ALL)}) into the live db: {rebuilt:7.1f} s  "
              f"{args.n / rebuilt:>9,.0f} events/s")  # fmt: skip
        print(f"python -m jpu.tools.replay (rebuild + compare):      {took:7.1f} s  "
              f"{args.n / took:>9,.0f} events/s  -> {verdict}")  # fmt: skip
    finally:
        nats.stop()
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--profile", help="run the replay under cProfile, stats to this file")
    asyncio.run(main(ap.parse_args()))
