"""How fast the projections fold the log into PostgreSQL, against raw COPY and a raw read of
JetStream (SPEC E3).

    python bench/bench_projection.py [--n 50000] [--batch 512] [--no-nats]

Starts its own PostgreSQL (fsync on, as in production) and, unless --no-nats, its own NATS.
Measured in the same run:
  reference  asyncpg COPY (copy_records_to_table) of n job rows into an empty table;
  apply      apply_to_all(every projection) over n events (a realistic job-lifecycle mix) in
             batches of 512, each batch one transaction with the tracking rows — the
             projector's real path without the bus (also: the jobs projection alone);
  raw read   the n events read back in order from JetStream and decoded (jpu.bus.ordered);
  live       run_projections(every projection) from the bus until wait_applied (end to end,
             its default batch);
  rebuild    rebuild_many(every projection) from seq 1 (what `python -m jpu.tools.replay` runs).
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
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from jpu.bus.model import Delivered
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.events import AnyEvent, decode, subject_for
from jpu.store import create_pool, migrate, wait_applied
from jpu.store.projection import Projection, apply_to_all, run_projections
from jpu.store.projections import ALL, jobs
from jpu.store.rebuilding import rebuild_many
from jpu.testing.pg_fixtures import sample_log

TABLES = [t for p in ALL for t in p.tables] + ["projection_positions", "projection_faults"]


def progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def events(n: int) -> list[AnyEvent]:
    log = sample_log(n // 6 + 10)
    return log[:n]


async def empty(pool: asyncpg.Pool) -> None:
    await pool.execute("; ".join(f"DELETE FROM {t}" for t in TABLES))


async def bench_copy(dsn: str, rows: list[tuple[object, ...]]) -> float:
    # A plain connection: asyncpg's own jsonb codec (str) works in binary COPY, ours does not.
    env, view = jobs.COLUMNS.index("env"), jobs.COLUMNS.index("view")
    rows = [tuple(json.dumps(v) if i in (env, view) else v for i, v in enumerate(r)) for r in rows]
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE jobs_copy (LIKE jobs INCLUDING ALL)")
        t = time.perf_counter()
        await conn.copy_records_to_table("jobs_copy", records=rows, columns=list(jobs.COLUMNS))
        return time.perf_counter() - t
    finally:
        await conn.close()


async def bench_apply(
    pool: asyncpg.Pool, log: list[AnyEvent], batch: int, projections: Sequence[Projection]
) -> float:
    delivered = [Delivered(i + 1, subject_for(e), e, {}) for i, e in enumerate(log)]
    t = time.perf_counter()
    for start in range(0, len(delivered), batch):
        await apply_to_all(pool, projections, delivered[start : start + batch])
        if (start // batch) % 40 == 0:
            progress(f"  apply: {start + batch}/{len(delivered)} events")
    return time.perf_counter() - t


async def bench_bus(
    nats_url: str, pool: asyncpg.Pool, log: list[AnyEvent], batch: int
) -> dict[str, float]:
    from jpu.bus import EventBus
    from jpu.bus.ordered import follow_ordered

    bus = await EventBus.connect(nats_url, stream="BENCH", prefix="bench")
    await bus.ensure_stream()
    out: dict[str, float] = {}
    try:
        t = time.perf_counter()
        last = 0
        for start in range(0, len(log), 1000):
            last = (await bus.append_many(log[start : start + 1000]))[-1]
        out["append"] = time.perf_counter() - t
        progress(f"  bus: appended {len(log)} events in {out['append']:.1f} s")

        stop = asyncio.Event()
        t = time.perf_counter()
        async for msgs in follow_ordered(bus.js, "BENCH", "bench.>", 1, stop, batch=batch):
            for m in msgs:
                decode(m.data)
            if msgs[-1].metadata.sequence.stream >= last:
                stop.set()
        out["raw_read"] = time.perf_counter() - t
        progress(f"  raw ordered read in {out['raw_read']:.1f} s")

        await empty(pool)
        stop = asyncio.Event()
        t = time.perf_counter()
        task = asyncio.create_task(run_projections(bus, pool, ALL, stop=stop))
        for p in ALL:
            await wait_applied(pool, p.name, last, timeout=600)
        out["live"] = time.perf_counter() - t
        stop.set()
        await task
        progress(f"  live projections in {out['live']:.1f} s")

        await empty(pool)
        t = time.perf_counter()
        await rebuild_many(bus, pool, ALL)
        out["rebuild"] = time.perf_counter() - t
        progress(f"  rebuild in {out['rebuild']:.1f} s")
        return out
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
        n = len(log)
        progress(f"{n} events for {sum(1 for e in log if type(e).__name__ == 'JobSubmitted')} jobs")

        t_jobs = await bench_apply(pool, log, args.batch, (jobs.projection,))
        rows = [
            tuple(r[c] for c in jobs.COLUMNS)
            for r in await pool.fetch(
                "SELECT " + ", ".join(f'"{c}"' for c in jobs.COLUMNS) + " FROM jobs"
            )
        ]
        await empty(pool)
        t_all = await bench_apply(pool, log, args.batch, ALL)
        copy_rows = (rows * (args.n // max(len(rows), 1) + 1))[: args.n]
        copy_rows = [(f"c{i}", *r[1:]) for i, r in enumerate(copy_rows)]
        progress(f"COPY of {len(copy_rows)} rows ...")
        t_copy = await bench_copy(dsn, copy_rows)

        copy_rate = len(copy_rows) / t_copy

        def line(what: str, seconds: float) -> None:
            rate = n / seconds
            print(
                f"{what:<34}{rate:>10,.0f} events/s ({seconds:6.2f} s)"
                f"   ratio to COPY {rate / copy_rate:.2f}"
            )

        print(f"{'reference COPY (jobs rows)':<34}{copy_rate:>10,.0f} rows/s   ({t_copy:6.2f} s)")
        line(f"apply_to_all(jobs), batch {args.batch}", t_jobs)
        line(f"apply_to_all(all {len(ALL)}), batch {args.batch}", t_all)

        if not args.no_nats:
            from jpu.embedded.nats import EmbeddedNats

            nats = EmbeddedNats(root / "nats")
            progress("starting NATS ...")
            url = nats.start()
            bus = await bench_bus(url, pool, log, args.batch)
            print(f"{'bus append_many':<34}{n / bus['append']:>10,.0f} events/s")
            line("reference raw ordered read+decode", bus["raw_read"])
            line(f"run_projections(all {len(ALL)}) from bus", bus["live"])
            line(f"rebuild_many(all {len(ALL)}) from seq 1", bus["rebuild"])
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
    ap.add_argument("--no-nats", action="store_true", help="skip the bus measurements")
    asyncio.run(main(ap.parse_args()))
