"""`jpu-admin backup FILE` / `restore FILE` (docs/operations.md): the JetStream streams and
buckets of the platform, and the PostgreSQL state the log does not hold, to one file and back
into an empty cluster; the projections are then rebuilt from the restored log (SPEC E3, E6).

What is written (jpu.tools.backup_format gives the layout):
- the event stream and its DLQ, the views (KV `jpu_views`) and the snapshots (object store
  `jpu_snapshots`): every message with its subject, headers (Nats-Msg-Id included), payload,
  stream sequence and time. Not the dispatcher's lease (`jpu_leases`): a restored lease would name
  a holder that no longer exists and hold off the election until it expired.
- PostgreSQL tables that no projection rebuilds: the notifier's sent-log and position (so a
  restore does not notify twice). Labs, users and token digests are events (SPEC SEC3): the
  `identities` projection rebuilds them from the restored log like every other view.

A restore keeps every stream sequence: a sequence the original stream had deleted (a KV value
overwritten, a snapshot thinned) is filled by a placeholder that is purged at the end, so the
expected-last-subject-sequence guards (SPEC E2) and the snapshots' `<stream>.state.<seq>` names
mean what they meant. The message times are the restore's own (JetStream stamps an append; the
original time is in the file, and each event carries its own `ts`, which is what the platform
reads). Durable consumers are not carried: a service's durable starts again from seq 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import asyncpg
import nats.errors
from nats.js import JetStreamContext
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from jpu.bus import EventBus
from jpu.bus.model import H_MSG_ID
from jpu.bus.permissions import SNAPSHOTS_BUCKET
from jpu.bus.reader import read_range
from jpu.commands import VIEWS_BUCKET
from jpu.store.db import MIGRATIONS_DIR
from jpu.store.projections import ALL
from jpu.store.rebuilding import rebuild_many
from jpu.tools.backup_format import (
    FORMAT,
    VERSION,
    BackupInvalid,
    Summary,
    Writer,
    frames,
    verify,
)

_PIPELINE: Final = 2048  # publishes in flight while restoring (acks awaited per window)
_RESTORE_DUPLICATE_WINDOW_S: Final = 0.1  # the server's least, while restoring (_restore_stream)
# Tables a rebuild fills (the projections) or that only track one (positions, faults), or the
# migrations' own: everything else in the schema is state that only PostgreSQL holds.
_DERIVED: Final = frozenset(
    {t for p in ALL for t in p.tables}
    | {"projection_positions", "projection_faults", "schema_migrations"}
)


class RestoreRefused(Exception):
    """The target is not empty (or not compatible): one sentence, nothing was changed."""


def stream_names(bus: EventBus) -> list[str]:
    """The streams a backup holds, in the order written: buckets first, the log last, so that
    no snapshot or view in the file is ahead of the log it summarises."""
    return [f"OBJ_{SNAPSHOTS_BUCKET}", f"KV_{VIEWS_BUCKET}", bus.dlq_stream, bus.stream]


async def backup(
    bus: EventBus, pool: asyncpg.Pool | None, out: IO[bytes], progress: Callable[[str], None]
) -> dict[str, int]:
    """Write the backup to `out`; returns messages (or rows) per stream (or table)."""
    js = bus.js
    counts: dict[str, int] = {}
    w = Writer(out)
    applied = await _migrations(pool) if pool is not None else []
    w.frame(
        "header", format=FORMAT, version=VERSION, created_at=time.time(), stream=bus.stream,
        prefix=bus.prefix, migrations=applied,
    )  # fmt: skip
    if pool is not None:
        for table in await _kept_tables(pool):
            n = 0
            w.frame("table", name=table)
            async with pool.acquire() as conn, conn.transaction():
                async for row in conn.cursor(f'SELECT row_to_json(t)::text AS v FROM "{table}" t'):
                    w.frame("row", v=row["v"])
                    n += 1
            w.frame("table_end", name=table, rows=n)
            counts[table] = n
    for name in stream_names(bus):
        try:
            info = await js.stream_info(name)
        except NotFoundError:
            continue  # e.g. no view written yet
        config = info.config.as_dict()
        subjects = list(info.config.subjects or [])
        w.frame(
            "stream", name=name, config=config, first_seq=int(info.state.first_seq),
            last_seq=int(info.state.last_seq),
        )  # fmt: skip
        n, last = 0, int(info.state.last_seq)
        filter_subject = subjects[0] if len(subjects) == 1 else ""
        reader = read_range(js, name, filter_subject, 1)
        async with contextlib.aclosing(reader) as msgs:
            async for msg in msgs:
                meta = msg.metadata  # parsed from the reply subject at each access: once
                seq = meta.sequence.stream
                if seq > last:
                    break
                w.frame(
                    "msg", seq=seq, subject=msg.subject, headers=dict(msg.headers or {}) or None,
                    data=bytes(msg.data), time_ns=round(meta.timestamp.timestamp() * 1e9),
                )  # fmt: skip
                n += 1
                if n % 100_000 == 0:
                    progress(f"{name}: {n} messages")
        w.frame("stream_end", name=name, messages=n, last_seq=last)
        counts[name] = n
    w.close()
    return counts


async def _migrations(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch("SELECT version FROM schema_migrations ORDER BY version")
    return [str(r["version"]) for r in rows]


async def _kept_tables(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch(
        "SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
    )
    names = [str(r["table_name"]) for r in rows if r["table_name"] not in _DERIVED]
    # a referenced table first, should one kept here reference another
    order = {"labs": 0, "users": 1}
    return sorted(names, key=lambda t: (order.get(t, 2), t))


# --- restore -------------------------------------------------------------------------------------


async def check_target(
    js: JetStreamContext, pool: asyncpg.Pool | None, summary: Summary, *, force: bool
) -> list[str]:
    """Refuse (RestoreRefused) a target that holds anything the file would replace, unless
    `force`; returns what `force` will delete. Nothing is changed here."""
    busy: list[str] = []
    for s in summary.streams:
        try:
            info = await js.stream_info(s.name)
        except NotFoundError:
            continue
        if info.state.last_seq > 0:
            busy.append(f"stream {s.name} ({info.state.messages} messages, last seq "
                        f"{info.state.last_seq})")  # fmt: skip
    if pool is not None:
        known = {p.name for p in MIGRATIONS_DIR.glob("*.sql")}
        newer = [m for m in summary.header.get("migrations", []) if m not in known]
        if newer:
            raise RestoreRefused(
                f"the backup's database has migrations this version does not know: {newer}"
            )
        for table in summary.tables:
            exists = await pool.fetchval("SELECT to_regclass($1) IS NOT NULL", f'public."{table}"')
            if exists and await pool.fetchval(f'SELECT EXISTS (SELECT 1 FROM "{table}")'):
                busy.append(f"table {table}")
    if busy and not force:
        raise RestoreRefused(
            "the target is not empty: " + "; ".join(busy) + ". Restore only into an empty "
            "cluster and database, or give --force to delete these first"
        )
    return busy


async def restore(
    bus: EventBus,
    pool: asyncpg.Pool | None,
    path: Path,
    *,
    force: bool = False,
    replicas: int | None = None,
    progress: Callable[[str], None] = lambda _: None,
) -> Summary:
    """Verify `path` whole, check the target is empty (or `force`), then write the streams and
    tables and rebuild the projections. Raises BackupInvalid or RestoreRefused before any change."""
    with path.open("rb") as f:
        summary = verify(f, str(path))
    progress(f"verified {path}: {summary.frames} records, {summary.size} bytes, checksum ok")
    js = bus.js
    if pool is not None:
        from jpu.store.db import migrate

        await migrate(pool)
    busy = await check_target(js, pool, summary, force=force)
    if busy:
        progress("--force: deleting " + "; ".join(busy))
    for s in summary.streams:  # empty ones too (a service's start may have made them): they
        with contextlib.suppress(NotFoundError):  # are made again with the file's configuration
            await js.delete_stream(s.name)
    if busy and pool is not None:
        for table in reversed(list(summary.tables)):
            await pool.execute(f'DELETE FROM "{table}"')
    by_name = {s.name: s for s in summary.streams}
    with path.open("rb") as f:
        it = frames(f, str(path))
        next(it)  # the header, verified
        for frame in it:
            k = frame["k"]
            if k == "table" and pool is not None:
                await _restore_table(pool, str(frame["name"]), it)
            elif k == "stream":
                s = by_name[str(frame["name"])]
                await _restore_stream(js, s.config, s.last_seq, it, replicas, progress)
    if pool is not None:
        progress("rebuilding the projections from the restored log")
        await rebuild_many(bus, pool, ALL)
    return summary


async def _restore_table(pool: asyncpg.Pool, table: str, it: Any) -> None:
    batch: list[tuple[str]] = []
    # the row's own JSON text back into the same columns (`$1::text`: the pool's json codec
    # must not quote it again)
    sql = f'INSERT INTO "{table}" SELECT * FROM json_populate_record(NULL::"{table}", ' + (
        "$1::text::json)"
    )
    async with pool.acquire() as conn, conn.transaction():
        for frame in it:
            if frame["k"] == "table_end":
                break
            batch.append((frame["v"],))
            if len(batch) >= 1000:
                await conn.executemany(sql, batch)
                batch.clear()
        if batch:
            await conn.executemany(sql, batch)


def _gap_subject(config: dict[str, Any]) -> str:
    """A subject of the stream no one reads, for the placeholders of deleted sequences."""
    first = str((config.get("subjects") or [">"])[0])
    tokens = [t for t in first.split(".") if t not in (">", "*")]
    return ".".join([*tokens, "_jpu_restore_gap"])


async def _restore_stream(
    js: JetStreamContext,
    raw: dict[str, Any],
    last_seq: int,
    it: Any,
    replicas: int | None,
    progress: Callable[[str], None],
) -> None:
    """Create the stream as it was (replicas as the target cluster says), append its messages
    so that each lands at its original sequence, purge the placeholders, restore the config."""
    final = dict(raw)
    env_replicas = os.environ.get("JPU_STREAM_REPLICAS")
    if replicas is None and env_replicas:
        replicas = int(env_replicas)
    if replicas is not None:
        final["num_replicas"] = replicas
    # a sealed stream takes no appends: sealed (if it was) by the update at the end
    during = dict(final, sealed=False, deny_purge=False)
    # Messages keep their Nats-Msg-Id. The original stream held two with one id only when they
    # came further apart than its window: the window is the least while restoring, and a
    # repeated id waits that long after its first (`recent`), so no message is dropped as a
    # duplicate (every ack is checked too).
    during["duplicate_window"] = int(_RESTORE_DUPLICATE_WINDOW_S * 1e9)
    name = str(final["name"])
    await js.add_stream(StreamConfig.from_response(dict(during)))
    gap = _gap_subject(final)
    pending: list[tuple[int, asyncio.Future[Any]]] = []
    seq, gaps, n = 0, 0, 0
    recent: dict[str, float] = {}  # msg id -> when sent, for the last window or so
    loop = asyncio.get_running_loop()

    async def settle() -> None:
        for want, fut in pending:
            try:
                ack = await fut
            except nats.errors.Error as e:
                raise BackupInvalid(f"stream {name}: the message for seq {want} failed: {e}") from e
            if int(ack.seq) != want or ack.duplicate:
                raise BackupInvalid(
                    f"stream {name}: the message for seq {want} landed at {ack.seq}"
                    f"{' as a duplicate' if ack.duplicate else ''}"
                )
        pending.clear()

    async def put(subject: str, data: bytes, headers: dict[str, str] | None) -> None:
        nonlocal seq
        msg_id = (headers or {}).get(H_MSG_ID)
        if msg_id is not None:
            now = loop.time()
            if msg_id in recent and now - recent[msg_id] < 2 * _RESTORE_DUPLICATE_WINDOW_S:
                await settle()
                await asyncio.sleep(2 * _RESTORE_DUPLICATE_WINDOW_S)
                now = loop.time()
            recent[msg_id] = now
            if len(recent) > 4 * _PIPELINE:  # keep only the newest: the older are long past
                for old in list(recent)[: 2 * _PIPELINE]:
                    if now - recent[old] > 2 * _RESTORE_DUPLICATE_WINDOW_S:
                        del recent[old]
        seq += 1
        # The headers as stored, nothing added (the file's headers are what the next backup
        # finds). An original Nats-Expected-Last-Subject-Sequence is checked again by the server
        # and holds, as every sequence before it is the original's; each ack's seq is checked.
        # (No `stream=`: nats-py would add a Nats-Expected-Stream header of its own.)
        fut = await js.publish_async(subject, data, headers=headers or None)
        pending.append((seq, fut))
        if len(pending) >= _PIPELINE:
            await settle()

    for frame in it:
        if frame["k"] == "stream_end":
            break
        target = int(frame["seq"])
        while seq + 1 < target:
            gaps += 1
            await put(gap, b"", {H_MSG_ID: f"_jpu_restore_gap.{seq + 1}"})
        await put(str(frame["subject"]), frame["data"], frame.get("headers"))
        n += 1
        if n % 100_000 == 0:
            progress(f"{name}: {n} messages")
    while seq < last_seq:  # deleted at the end of the original stream
        gaps += 1
        await put(gap, b"", {H_MSG_ID: f"_jpu_restore_gap.{seq + 1}"})
    await settle()
    if gaps:
        await js.purge_stream(name, subject=gap)
    await js.update_stream(StreamConfig.from_response(dict(final)))
    progress(f"{name}: {n} messages restored, last seq {seq}, {gaps} deleted seqs kept as gaps")


def describe(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in counts.items())


def dumps_summary(summary: Summary) -> str:
    return json.dumps(
        {
            "streams": {s.name: {"messages": s.messages, "last_seq": s.last_seq}
                        for s in summary.streams},
            "tables": summary.tables,
            "records": summary.frames,
            "bytes": summary.size,
        }
    )  # fmt: skip


# --- the command line (`python -m jpu.tools.admin backup|restore`) ------------------------------

COMMANDS: Final = ("backup", "restore")


def add_parsers(sub: Any) -> None:
    b = sub.add_parser("backup", help="the streams, buckets and user tables to one file")
    b.add_argument("file", type=Path, help="written whole, then renamed into place")
    r = sub.add_parser(
        "restore", help="a backup file into an empty cluster; the projections rebuilt from it"
    )
    r.add_argument("file", type=Path)
    r.add_argument("--force", action="store_true", help="delete what the target holds first")
    r.add_argument("--replicas", type=int, help="copies of each stream (default: the file's, "
                   "or JPU_STREAM_REPLICAS)")  # fmt: skip
    r.add_argument("--verify-only", action="store_true", help="check the file; touch nothing")
    for p in (b, r):
        p.add_argument("--nats", help="NATS URL (default: from the configuration)")
        p.add_argument("--database-url", help="PostgreSQL DSN (default: from the configuration)")
        p.add_argument("--no-database", action="store_true", help="the streams only")


def _server(args: Any, key: str) -> str:
    from jpu.config import load_config
    from jpu.stack import discover

    given = args.nats if key == "nats_url" else args.database_url
    if given:
        return str(given)
    config = load_config()
    return discover.server_url(key, getattr(config, key), Path(config.data_dir), os.environ)


def _say(text: str) -> None:
    print(f"jpu-admin: {text}", flush=True)


async def _run(args: Any) -> None:
    from jpu.config import load_config
    from jpu.store.db import create_pool

    config = load_config()
    if args.what == "restore" and args.verify_only:
        with args.file.open("rb") as f:
            summary = verify(f, str(args.file))
        print(dumps_summary(summary))
        return
    bus = await EventBus.connect(
        _server(args, "nats_url"), stream=config.stream_name, prefix=config.subject_prefix,
        name="jpu-admin-backup",
    )  # fmt: skip
    pool = None if args.no_database else await create_pool(_server(args, "database_url"))
    t0 = time.monotonic()
    try:
        if args.what == "backup":
            part = args.file.with_name(args.file.name + ".part")
            with part.open("wb") as out:
                counts = await backup(bus, pool, out, _say)
                os.fsync(out.fileno())
            part.replace(args.file)  # a file under the name is always a complete one
            _say(f"backup {args.file}: {describe(counts)} in {time.monotonic() - t0:.1f} s")
        else:
            summary = await restore(
                bus, pool, args.file, force=args.force, replicas=args.replicas, progress=_say
            )
            _say(f"restored {args.file} in {time.monotonic() - t0:.1f} s: "
                 f"{dumps_summary(summary)}")  # fmt: skip
    finally:
        if pool is not None:
            await pool.close()
        await bus.close()


def main(args: Any) -> int:
    from jpu.stack import discover

    try:
        asyncio.run(_run(args))
    except (BackupInvalid, RestoreRefused) as e:
        print(f"jpu-admin {args.what}: refused: {e}", flush=True, file=sys.stderr)
        return 2
    except discover.NoServer as e:
        print(f"jpu-admin {args.what}: {e}", file=sys.stderr)
        return 2
    except (OSError, asyncpg.PostgresError, nats.errors.Error) as e:
        print(f"jpu-admin {args.what}: {e!r}", file=sys.stderr)
        return 1
    return 0
