"""How fast the jobs projection folds the log into PostgreSQL, against raw COPY (SPEC E3).

    python bench/bench_projection.py [--n 50000] [--batch 512] [--no-nats]

Starts its own PostgreSQL (fsync on, as in production) and, unless --no-nats, its own NATS.
Measured in the same run:
  reference  asyncpg COPY (copy_records_to_table) of n job rows into an empty table;
  apply      apply_batch(jobs) over n events (a realistic job-lifecycle mix) in batches of 512,
             each batch one transaction with its tracking row — the projector's real path;
  bus        n events appended to JetStream, then run_projection until wait_applied (end to end).
Progress on stderr, results on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import asyncpg

from jpu.bus.model import Delivered
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.events import AnyEvent, subject_for
from jpu.store import apply_batch, create_pool, migrate, run_projection, wait_applied
from jpu.store.projections import jobs
from jpu.testing.pg_fixtures import sample_log


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def events(n: int) -> list[AnyEvent]:
    log = sample_log(n // 6 + 10)
    return log[:n]


async def bench_copy(dsn: str, rows: list[tuple[object, ...]]) -> float:
    # A plain connection: asyncpg's own jsonb codec (str) works in binary COPY, ours does not.
    env = jobs.COLUMNS.index("env")
    rows = [(*r[:env], json.dumps(r[env]), *r[env + 1 :]) for r in rows]
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE jobs_copy (LIKE jobs INCLUDING ALL)")
        t = time.perf_counter()
        await conn.copy_records_to_table("jobs_copy", records=rows, columns=list(jobs.COLUMNS))
        return time.perf_counter() - t
    finally:
        await conn.close()


async def bench_apply(pool: asyncpg.Pool, log: list[AnyEvent], batch: int) -> float:
    delivered = [Delivered(i + 1, subject_for(e), e, {}) for i, e in enumerate(log)]
    t = time.perf_counter()
    for start in range(0, len(delivered), batch):
        await apply_batch(pool, jobs.projection, delivered[start : start + batch])
        if (start // batch) % 20 == 0:
            progress(f"  apply: {start + batch}/{len(delivered)} events")
    return time.perf_counter() - t


async def bench_bus(
    nats_url: str, pool: asyncpg.Pool, log: list[AnyEvent], batch: int
) -> tuple[float, float]:
    from jpu.bus import EventBus

    bus = await EventBus.connect(nats_url, stream="BENCH", prefix="bench")
    await bus.ensure_stream()
    try:
        t = time.perf_counter()
        last = 0
        for start in range(0, len(log), 1000):
            last = (await bus.append_many(log[start : start + 1000]))[-1]
        t_append = time.perf_counter() - t
        progress(f"  bus: appended {len(log)} events in {t_append:.1f} s")
        stop = asyncio.Event()
        t = time.perf_counter()
        task = asyncio.create_task(
            run_projection(bus, pool, jobs.projection, stop=stop, batch=batch)
        )
        await wait_applied(pool, "jobs", last, timeout=300)
        t_project = time.perf_counter() - t
        stop.set()
        await task
        return t_append, t_project
    finally:
        await bus.delete_stream()
        await bus.close()


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="jpu-bench-"))
    root.chmod(0o755)
    pg = EmbeddedPostgres(root / "pg", durable=True)
    nats = None
    try:
        progress("starting PostgreSQL ...")
        dsn = pg.start()
        pool = await create_pool(dsn, max_size=4)
        await migrate(pool)
        log = events(args.n)
        progress(
            f"{len(log)} events for "
            f"{sum(1 for e in log if type(e).__name__ == 'JobSubmitted')} jobs"
        )

        t_apply = await bench_apply(pool, log, args.batch)
        rows = [
            tuple(r[c] for c in jobs.COLUMNS)
            for r in await pool.fetch(
                "SELECT " + ", ".join(f'"{c}"' for c in jobs.COLUMNS) + " FROM jobs"
            )
        ]
        copy_rows = (rows * (args.n // max(len(rows), 1) + 1))[: args.n]
        copy_rows = [(f"c{i}", *r[1:]) for i, r in enumerate(copy_rows)]
        progress(f"COPY of {len(copy_rows)} rows ...")
        t_copy = await bench_copy(dsn, copy_rows)

        copy_rate, apply_rate = len(copy_rows) / t_copy, len(log) / t_apply
        print(f"reference COPY:        {copy_rate:>10,.0f} rows/s   ({t_copy:.2f} s)")
        print(
            f"apply_batch(jobs):     {apply_rate:>10,.0f} events/s ({t_apply:.2f} s, "
            f"batch {args.batch})   ratio to COPY {apply_rate / copy_rate:.2f}"
        )

        if not args.no_nats:
            from jpu.embedded.nats import EmbeddedNats

            nats = EmbeddedNats(root / "nats")
            progress("starting NATS ...")
            url = nats.start()
            await pool.execute("DELETE FROM jobs; DELETE FROM projection_positions")
            t_append, t_proj = await bench_bus(url, pool, log, args.batch)
            print(f"bus append_many:       {len(log) / t_append:>10,.0f} events/s")
            print(
                f"run_projection (bus):  {len(log) / t_proj:>10,.0f} events/s   "
                f"ratio to COPY {len(log) / t_proj / copy_rate:.2f}"
            )
        await pool.close()
    finally:
        if nats is not None:
            nats.stop()
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--n", type=int, default=50_000, help="events (and COPY rows)")
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--no-nats", action="store_true", help="skip the end-to-end bus measurement")
    asyncio.run(main(ap.parse_args()))
