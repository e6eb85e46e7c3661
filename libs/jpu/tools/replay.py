"""Replay for audits (SPEC E6): rebuild every projection from the log into a scratch database and
compare it, table by table, with the live projections.

Each projection is replayed up to the sequence the live one has applied, so a live projection
that merely lags is not a difference. With `until_ts` the rebuild stops at that point in time
and is only reported (the live tables are at "now", a comparison would be meaningless).

    python -m jpu.tools.replay --nats URL --db DSN [--until TS] [--scratch-db DSN]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, cast

import asyncpg
import msgspec

from jpu.store import create_database, create_pool, drop_database, last_applied, migrate
from jpu.store.faults import faults
from jpu.store.projection import Projection
from jpu.store.projections import ALL
from jpu.store.rebuilding import rebuild_many

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


class FaultReport(msgspec.Struct):
    """An event the rebuilt projection could not apply (SPEC E6: reported, never a crash)."""

    seq: int
    subject: str
    event_type: str
    error: str


class ProjectionAudit(msgspec.Struct):
    projection: str
    live_seq: int | None  # None when not compared (until_ts)
    rebuilt_seq: int
    tables: list[TableDiff]
    faults: list[FaultReport] = []

    @property
    def ok(self) -> bool:
        return not self.faults and all(t.differing == 0 for t in self.tables)


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
            if p.faults:
                status += f", {len(p.faults)} events it could not apply"
            lines.append(f"{p.projection}: {status} (replayed to seq {p.rebuilt_seq})")
            for t in p.tables:
                lines.append(
                    f"  {t.table}: live {t.live_rows} rows, rebuilt {t.rebuilt_rows}"
                    + (f", {t.differing} differing" if t.differing else "")
                )
                lines += [f"    only live:    {r}" for r in t.only_live]
                lines += [f"    only rebuilt: {r}" for r in t.only_rebuilt]
            lines += [
                f"  could not apply seq {f.seq} ({f.event_type} on {f.subject}): {f.error}"
                for f in p.faults
            ]
        return "\n".join(lines)


def _freeze(value: Any) -> Any:
    """Make a column value hashable (arrays, jsonb) so rows can be compared as multisets."""
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


# A table's rows as a multiset, digested in the server: the sorted SHA-256 of each row's text.
_DIGEST = """SELECT count(*), encode(sha256(convert_to(coalesce(string_agg(h, '' ORDER BY h), ''),
    'UTF8')), 'hex') FROM (SELECT encode(sha256(convert_to(t::text, 'UTF8')), 'hex') AS h
    FROM {table} t) rows"""


async def _digest(db: asyncpg.Pool | asyncpg.Connection, table: str) -> tuple[int, str]:
    row = await db.fetchrow(_DIGEST.format(table=table))
    assert row is not None  # an aggregate always answers one row
    return int(row[0]), str(row[1])


async def compare_table(
    live: asyncpg.Pool,
    rebuilt: asyncpg.Pool,
    table: str,
    live_digest: tuple[int, str] | None = None,
) -> TableDiff:
    """Equal digests: the same rows (the common case; PostgreSQL hashes the rows instead of
    Python fetching and comparing both tables); otherwise every row is fetched and compared to
    show which differ. `live_digest`: the live side's, when already taken."""
    if live_digest is None:
        (n_live, d_live), (n_rebuilt, d_rebuilt) = await asyncio.gather(
            _digest(live, table), _digest(rebuilt, table)
        )
    else:
        (n_live, d_live), (n_rebuilt, d_rebuilt) = live_digest, await _digest(rebuilt, table)
    if d_live == d_rebuilt:
        return TableDiff(table=table, live_rows=n_live, rebuilt_rows=n_rebuilt)
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


async def _audit_all(
    bus: EventBus,
    live: asyncpg.Pool,
    scratch: asyncpg.Pool,
    projections: Sequence[Projection],
    until_ts: float | None,
    progress: Callable[[int], None] | None,
) -> list[ProjectionAudit]:
    """One read of the log rebuilds every projection, each up to the seq its live twin has
    applied (a live projection that merely lags is not a difference)."""
    live_seqs: dict[str, int | None] = dict.fromkeys((p.name for p in projections), None)
    digests: dict[str, tuple[int, str]] = {}
    live_side = None
    if until_ts is None:  # compared: the live side is read while the log is replayed
        known: asyncio.Future[dict[str, int]] = asyncio.get_running_loop().create_future()
        live_side = asyncio.create_task(_live_state(live, projections, known))
        first: list[asyncio.Future[Any]] = [known, live_side]
        await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
        if not known.done():
            await live_side  # failed before reading the positions: its error
        live_seqs.update(known.result())
    try:
        seqs = await rebuild_many(
            bus, scratch, projections, until_ts=until_ts, until_seqs=live_seqs, progress=progress
        )
        if live_side is not None:
            digests = await live_side
    finally:
        if live_side is not None and not live_side.done():
            live_side.cancel()
            await asyncio.gather(live_side, return_exceptions=True)
    out = []
    for p in projections:
        tables = [await compare_table(live, scratch, t, digests.get(t)) for t in p.tables]
        if until_ts is not None:  # reported, not compared
            tables = [TableDiff(t.table, t.live_rows, t.rebuilt_rows) for t in tables]
        found = [
            FaultReport(f.seq, f.subject, f.event_type, f.error)
            for f in await faults(scratch, p.name)
        ]
        out.append(ProjectionAudit(p.name, live_seqs[p.name], seqs[p.name], tables, found))
    return out


async def _live_state(
    live: asyncpg.Pool, projections: Sequence[Projection], positions: asyncio.Future[dict[str, int]]
) -> dict[str, tuple[int, str]]:
    """The live projections' positions (set into `positions` first, for the rebuild to start)
    and then the digests of their tables, all in one snapshot: the rows are those of exactly
    these positions (a projection commits its rows and its position together, SPEC E3)."""
    async with (
        live.acquire() as proxy,
        proxy.transaction(isolation="repeatable_read", readonly=True),
    ):
        conn = cast(asyncpg.Connection, proxy)
        rows = await conn.fetch(
            "SELECT projection, last_seq FROM projection_positions"
            " WHERE projection = ANY($1::text[])",
            [p.name for p in projections],
        )
        found = {r["projection"]: int(r["last_seq"]) for r in rows}
        positions.set_result({p.name: found.get(p.name, 0) for p in projections})
        return {t: await _digest(conn, t) for p in projections for t in p.tables}


async def audit(
    bus: EventBus,
    pool_live: asyncpg.Pool,
    scratch_dsn: str,
    *,
    until_ts: float | None = None,
    projections: tuple[Projection, ...] = ALL,
    progress: Callable[[str, int], None] | None = None,
) -> Report:
    """Rebuild `projections` into the (empty or disposable) scratch database and compare; its
    projection tables are made UNLOGGED (not crash-safe: a scratch database is thrown away)."""
    scratch = await create_pool(scratch_dsn, max_size=2)
    try:
        await migrate(scratch)
        for table in dict.fromkeys(t for p in projections for t in p.tables):
            # disposable: its rows need no WAL (less for the server to write, a faster drop);
            # in each projection's order, a referencing table before the one it references
            # (api_tokens → users → labs): a logged table may not reference an unlogged one
            await scratch.execute(f"ALTER TABLE {table} SET UNLOGGED")
        step = (lambda seq: progress("projections", seq)) if progress else None
        audits = await _audit_all(bus, pool_live, scratch, projections, until_ts, step)
        for _ in range(2):  # a live projection that moved on during the comparison: again
            moved = [
                p
                for p, a in zip(projections, audits, strict=True)
                if not a.ok and a.live_seq != await last_applied(pool_live, p.name)
            ]
            if not moved:
                break
            again = {a.projection: a for a in await _audit_all(
                bus, pool_live, scratch, moved, until_ts, step
            )}  # fmt: skip
            audits = [again.get(a.projection, a) for a in audits]
        return Report(audits, compared=until_ts is None)
    finally:
        await scratch.close()


async def _main(args: argparse.Namespace) -> int:
    from jpu.bus import EventBus

    t0 = time.monotonic()
    total = 0

    def show(name: str, seq: int) -> None:  # U3: progress, rate and what is left
        rate = seq / max(time.monotonic() - t0, 1e-9)
        left = (total - seq) / rate if rate > 0 else 0.0
        print(
            f"\r{name}: seq {seq:,} of {total:,} ({rate:,.0f} events/s, ~{left:,.0f} s left)",
            end="", file=sys.stderr, flush=True,
        )  # fmt: skip

    bus = await EventBus.connect(  # the events alone: the projections read no header
        args.nats, stream=args.stream, prefix=args.prefix, name="jpu-replay", headers=False
    )
    live = await create_pool(args.db, max_size=2)
    scratch_name = None
    scratch_dsn = args.scratch_db
    if scratch_dsn is None:
        scratch_name = f"jpu_audit_{uuid.uuid4().hex[:12]}"
        scratch_dsn = await create_database(args.db, scratch_name)
    try:
        total = await bus.last_seq()
        print(f"total events in log: {total}", file=sys.stderr)
        report = await audit(bus, live, scratch_dsn, until_ts=args.until, progress=show)
        print(file=sys.stderr)
    finally:
        if scratch_name is not None:
            await drop_database(args.db, scratch_name)
        await live.close()
        await bus.close()
    print(report.summary())
    if not report.compared:
        return 1 if any(p.faults for p in report.projections) else 0
    print("no differences" if report.ok else "DIFFERENCES FOUND")
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    from jpu.config import load_config

    cfg = load_config()
    ap = argparse.ArgumentParser(
        prog="python -m jpu.tools.replay",
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
