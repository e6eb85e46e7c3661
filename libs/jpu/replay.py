"""Replay for audits (SPEC E6): rebuild every projection from the log into a scratch database and
compare it, table by table, with the live projections.

Each projection is replayed up to the sequence the live one has applied, so a live projection
that merely lags is not a difference. With `until_ts` the rebuild stops at that point in time
and is only reported (the live tables are at "now", a comparison would be meaningless).

    python -m jpu.replay --nats URL --db DSN [--until TS] [--scratch-db DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import asyncpg
import msgspec

from jpu.store import create_database, create_pool, drop_database, last_applied, migrate, rebuild
from jpu.store.projection import Projection
from jpu.store.projections import ALL

if TYPE_CHECKING:
    from jpu.bus import EventBus

_SHOWN = 5  # differing rows kept per table in the report


class TableDiff(msgspec.Struct):
    table: str
    live_rows: int
    rebuilt_rows: int
    only_live: list[dict[str, Any]] = []  # first rows that the replay did not produce
    only_rebuilt: list[dict[str, Any]] = []  # first rows the live projection lacks
    differing: int = 0  # rows in one side only, both sides counted


class ProjectionAudit(msgspec.Struct):
    projection: str
    live_seq: int | None  # None when not compared (until_ts)
    rebuilt_seq: int
    tables: list[TableDiff]

    @property
    def ok(self) -> bool:
        return all(t.differing == 0 for t in self.tables)


class Report(msgspec.Struct):
    projections: list[ProjectionAudit]
    compared: bool

    @property
    def ok(self) -> bool:
        return all(p.ok for p in self.projections)

    def summary(self) -> str:
        lines = []
        for p in self.projections:
            status = ("OK" if p.ok else "DIFFERENT") if self.compared else "rebuilt"
            lines.append(f"{p.projection}: {status} (replayed to seq {p.rebuilt_seq})")
            for t in p.tables:
                lines.append(
                    f"  {t.table}: live {t.live_rows} rows, rebuilt {t.rebuilt_rows}"
                    + (f", {t.differing} differing" if t.differing else "")
                )
                lines += [f"    only live:    {r}" for r in t.only_live]
                lines += [f"    only rebuilt: {r}" for r in t.only_rebuilt]
        return "\n".join(lines)


def _freeze(value: Any) -> Any:
    """Make a column value hashable (arrays, jsonb) so rows can be compared as multisets."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


async def compare_table(live: asyncpg.Pool, rebuilt: asyncpg.Pool, table: str) -> TableDiff:
    a_recs = await live.fetch(f"SELECT * FROM {table}")
    b_recs = await rebuilt.fetch(f"SELECT * FROM {table}")
    a = {tuple(_freeze(v) for v in r.values()): r for r in a_recs}
    b = {tuple(_freeze(v) for v in r.values()): r for r in b_recs}
    only_a = [k for k in a if k not in b]
    only_b = [k for k in b if k not in a]
    return TableDiff(
        table=table,
        live_rows=len(a_recs),
        rebuilt_rows=len(b_recs),
        only_live=[dict(a[k]) for k in only_a[:_SHOWN]],
        only_rebuilt=[dict(b[k]) for k in only_b[:_SHOWN]],
        differing=len(only_a) + len(only_b),  # every projection table has a primary key
    )


async def _audit_one(
    bus: EventBus,
    live: asyncpg.Pool,
    scratch: asyncpg.Pool,
    p: Projection,
    until_ts: float | None,
    progress: Callable[[int], None] | None,
) -> ProjectionAudit:
    for _ in range(3):  # a live projection that moved on during the comparison: try again
        live_seq = None if until_ts is not None else await last_applied(live, p.name)
        seq = await rebuild(
            bus, scratch, p, until_ts=until_ts, until_seq=live_seq, progress=progress
        )
        tables = [await compare_table(live, scratch, t) for t in p.tables]
        if until_ts is not None:  # reported, not compared
            tables = [TableDiff(t.table, t.live_rows, t.rebuilt_rows) for t in tables]
        result = ProjectionAudit(p.name, live_seq, seq, tables)
        if result.ok or live_seq == await last_applied(live, p.name):
            break
    return result


async def audit(
    bus: EventBus,
    pool_live: asyncpg.Pool,
    scratch_dsn: str,
    *,
    until_ts: float | None = None,
    projections: tuple[Projection, ...] = ALL,
    progress: Callable[[str, int], None] | None = None,
) -> Report:
    """Rebuild `projections` into the (empty or disposable) scratch database and compare."""
    scratch = await create_pool(scratch_dsn, max_size=2)
    try:
        await migrate(scratch)
        audits = []
        for p in projections:
            step = (lambda seq, name=p.name: progress(name, seq)) if progress else None
            audits.append(await _audit_one(bus, pool_live, scratch, p, until_ts, step))
        return Report(audits, compared=until_ts is None)
    finally:
        await scratch.close()


async def _main(args: argparse.Namespace) -> int:
    from jpu.bus import EventBus

    def show(name: str, seq: int) -> None:
        print(f"\r{name}: replayed to seq {seq}", end="", file=sys.stderr, flush=True)

    bus = await EventBus.connect(
        args.nats, stream=args.stream, prefix=args.prefix, name="jpu-replay"
    )
    live = await create_pool(args.db, max_size=2)
    scratch_name = None
    scratch_dsn = args.scratch_db
    if scratch_dsn is None:
        scratch_name = f"jpu_audit_{uuid.uuid4().hex[:12]}"
        scratch_dsn = await create_database(args.db, scratch_name)
    try:
        print(f"total events in log: {await bus.last_seq()}", file=sys.stderr)
        report = await audit(bus, live, scratch_dsn, until_ts=args.until, progress=show)
        print(file=sys.stderr)
    finally:
        if scratch_name is not None:
            await drop_database(args.db, scratch_name)
        await live.close()
        await bus.close()
    print(report.summary())
    if not report.compared:
        return 0
    print("no differences" if report.ok else "DIFFERENCES FOUND")
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    from jpu.config import load_config

    cfg = load_config()
    ap = argparse.ArgumentParser(
        prog="python -m jpu.replay",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--nats", default=cfg.nats_url, help="NATS URL (default: config)")
    ap.add_argument("--db", default=cfg.database_url, help="live projections DSN")
    ap.add_argument(
        "--until",
        type=float,
        default=None,
        help="rebuild only events with ts <= this time (no comparison)",
    )
    ap.add_argument(
        "--scratch-db",
        default=None,
        help="DSN of an empty scratch database (default: a temporary one)",
    )
    ap.add_argument("--stream", default=cfg.stream_name)
    ap.add_argument("--prefix", default=cfg.subject_prefix)
    return asyncio.run(_main(ap.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
