"""`jpu-admin explain-usage LAB` and `jpu-admin usage-statement` (SPEC F5).

For auditors: every charge that makes up a lab's usage, and a statement per lab and period like
Slurm's `sreport`. Both read the log from NATS (`--nats`, the configuration's `nats_url`, else
the running stack's on this checkout: jpu.stack.discover) and answer with jpu.explain.usage —
the same answer `GET /v1/admin/labs/{lab}/usage-explain` and `GET /v1/admin/usage-statement`
give. The log is read whole (a lab's usage is every charge ever); `--db` reads the same lines
from the `usage_ledger` projection instead (PostgreSQL, found the same way, or
`--database-url`), by index, for a long log — the projection is a fold of the log that
`python -m jpu.tools.replay` audits. A server that cannot be found, reached, or that holds no event
stream is one sentence on stderr and exit 1, never a traceback. Times (`--since`, `--until`,
`--at`) are epoch seconds or ISO 8601 (`2026-12-01`, `2026-12-01T09:00`, with an offset or
local time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import asyncpg
import msgspec
import nats
import nats.errors
import nats.js.errors

from jpu.bus.auth import client_options
from jpu.explain.usage import ChargeLine, Ledger, UsageExplanation, UsageStatement, explain_usage
from jpu.explain.usage import usage_statement as statement

if TYPE_CHECKING:
    from jpu.config import Config

COMMANDS: Final = ("explain-usage", "usage-statement")
_RELEASE: Final = {"demoted": "R3", "maintenance": "M1", "capacity": "R5"}


def when(text: str) -> float:
    """Epoch seconds, or an ISO 8601 date/time (local time unless it has an offset)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as e:
        raise argparse.ArgumentTypeError(
            f"{text!r}: not epoch seconds nor an ISO 8601 date/time (e.g. 2026-12-01T09:00)"
        ) from e


def add_parsers(sub: Any) -> None:
    def period(p: argparse.ArgumentParser) -> None:
        p.add_argument("--since", type=when, help="charges at or after T")
        p.add_argument("--until", type=when, help="charges before T")
        p.add_argument("--nats", help="NATS URL (default: from the configuration)")
        p.add_argument(
            "--db", action="store_true", help="read the usage_ledger projection, not the log"
        )
        p.add_argument("--database-url", help="with --db: PostgreSQL DSN (default: configured)")
        p.add_argument("--json", action="store_true", help="the API's JSON")

    x = sub.add_parser("explain-usage", help="every charge that makes up a lab's usage (F5)")
    x.add_argument("lab")
    x.add_argument("--at", type=when, help="value the charges at T (default: now)")
    period(x)
    period(sub.add_parser("usage-statement", help="usage per lab and period (like sreport)"))


def _stamp(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _kind(c: ChargeLine) -> str:
    if c.kind == "reservation":
        return f"reservation ({_RELEASE.get(c.reason, c.reason)}, at release)"
    if c.kind == "run" and any(h.what == "reservation" for h in c.held):
        return "run + reservation (R4)"
    return c.kind


def render_explanation(x: UsageExplanation) -> str:
    head = (
        f"{x.lab}: usage {x.usage:,.3f} TFLOP-s at {_stamp(x.at)} (stored {x.raw_value:,.3f} "
        f"as of {_stamp(x.as_of)}; half-life {x.half_life_s:,.0f} s)"
    )
    cols = f"{'SEQ':>6} {'CHARGED AT':<19} {'JOB':<14} {'ATT':>3} {'USER':<12} {'KIND':<30} "
    cols += f"{'GPU-S':>10} {'TIER':<10} {'TFLOPS':>7} {'TFLOP-S':>14} {'DECAY':>8} {'NOW':>14}"
    lines = [head, cols]
    for c in x.charges:
        gpu_s = sum(h.gpu_seconds for h in c.held)
        tiers = ",".join(sorted({h.tier or "?" for h in c.held})) or "-"
        tflops = ",".join(f"{t:g}" for t in sorted({h.tflops for h in c.held})) or "-"
        lines.append(
            f"{c.seq:>6} {_stamp(c.at):<19} {c.job_id or '-':<14} {c.attempt or '-':>3} "
            f"{c.user or '-':<12} {_kind(c):<30} {gpu_s:>10,.1f} {tiers:<10} {tflops:>7} "
            f"{c.amount:>14,.3f} {c.decay:>8.6f} {c.value_now:>14,.3f}"
        )
    lines.append(
        f"listed: {len(x.charges)} charge(s), {x.listed_amount:,.3f} TFLOP-s charged, "
        f"{x.listed_value:,.3f} now; every charge of {x.lab}: {x.total_value:,.3f} now "
        f"= its usage {x.usage:,.3f} (F5)"
    )
    return "\n".join(lines)


def render_statement(s: UsageStatement) -> str:
    tiers = sorted(s.gpu_hours)
    lines = [f"Usage statement {_stamp(s.since)} → {_stamp(s.until)} (by the charges' time)"]
    cols = f"{'LAB':<10} {'TFLOP-S':>16} {'SHARE':>7} {'JOBS':>6} {'ATTEMPTS':>8}"
    cols += "".join(f" {'GPU-H ' + t:>16}" for t in tiers)
    cols += f" {'RESERVED GPU-H':>15} {'INITIAL':>12}"
    lines.append(cols)
    for lab in s.labs:
        row = f"{lab.lab:<10} {lab.tflop_s:>16,.1f} {lab.share:>7.1%} {lab.jobs:>6} "
        row += f"{lab.attempts:>8}"
        row += "".join(f" {lab.gpu_hours.get(t, 0.0):>16,.2f}" for t in tiers)
        row += f" {lab.reserved_gpu_hours:>15,.2f} {lab.initial_tflop_s:>12,.1f}"
        lines.append(row)
    total = f"{'total':<10} {s.tflop_s:>16,.1f} {'':>7} {'':>6} {'':>8}"
    lines.append(total + "".join(f" {s.gpu_hours[t]:>16,.2f}" for t in tiers))
    return "\n".join(lines)


class Unreachable(Exception):
    """The log or the database cannot be read: one sentence for the admin."""


def _url(args: argparse.Namespace, config: Config, key: str) -> str:
    from jpu.stack import discover

    given = args.nats if key == "nats_url" else args.database_url
    if given:
        return str(given)
    data_dir = Path(config.data_dir)
    try:
        return discover.server_url(key, getattr(config, key), data_dir, os.environ)
    except discover.NoServer as e:
        raise Unreachable(str(e)) from e


async def _book(args: argparse.Namespace, config: Config) -> Ledger:
    if args.db:
        from jpu.store.db import create_pool, migrate
        from jpu.store.projections.usage_ledger import read_ledger as from_db

        dsn = _url(args, config, "database_url")
        try:
            pool = await create_pool(dsn)
        except (OSError, asyncpg.PostgresError) as e:
            raise Unreachable(f"cannot reach PostgreSQL at {dsn}: {e}") from e
        try:
            await migrate(pool)
            lab = args.lab if args.what == "explain-usage" else None  # its every charge (F5)
            if lab is not None:
                return await from_db(pool, lab=lab)
            return await from_db(pool, since=args.since, until=args.until)
        finally:
            await pool.close()
    from jpu.bus import EventBus
    from jpu.bus.history import read_ledger

    url = _url(args, config, "nats_url")
    await _probe(url, config.stream_name)
    bus = await EventBus.connect(
        url, stream=config.stream_name, prefix=config.subject_prefix, name="jpu-admin"
    )
    try:
        return await read_ledger(bus)
    finally:
        await bus.close()


async def _probe(url: str, stream: str) -> None:
    """One short try before the bus's reconnect-forever connection: is the server there, and
    is it this platform's (it holds the event stream)? Unreachable says which is not so."""

    async def quiet(_: Exception) -> None:
        return None

    servers = [u.strip() for u in url.split(",") if u.strip()]
    try:
        nc = await nats.connect(
            servers, allow_reconnect=False, max_reconnect_attempts=1,
            reconnect_time_wait=0.1, connect_timeout=2, error_cb=quiet,
            **client_options(),  # SPEC SEC2: the operator's identity
        )  # fmt: skip
    except (OSError, nats.errors.Error, TimeoutError) as e:
        raise Unreachable(f"cannot reach NATS at {url} ({e})") from e
    try:
        await nc.jetstream().stream_info(stream)
    except nats.js.errors.NotFoundError as e:
        raise Unreachable(
            f"NATS at {url} has no stream {stream!r}: it is not this platform's server "
            "(give --nats URL, or JPU_STREAM_NAME if its stream is named otherwise)"
        ) from e
    except nats.errors.Error as e:
        raise Unreachable(f"NATS at {url} does not answer for stream {stream!r} ({e})") from e
    finally:
        await nc.close()


async def _answer(args: argparse.Namespace) -> Any:
    from jpu.config import load_config

    config = load_config()
    book = await _book(args, config)
    if args.what == "explain-usage":
        at = args.at if args.at is not None else time.time()
        return explain_usage(
            book, args.lab, at, config.half_life_s, since=args.since, until=args.until
        )
    return statement(book, since=args.since, until=args.until)


def main(args: argparse.Namespace) -> int:
    if args.since is not None and args.until is not None and args.until <= args.since:
        print("jpu-admin: --until must be after --since", file=sys.stderr)
        return 2
    try:
        answer = asyncio.run(_answer(args))
    except Unreachable as e:
        print(f"jpu-admin {args.what}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(msgspec.to_builtins(answer), indent=2, sort_keys=True))
    elif isinstance(answer, UsageExplanation):
        print(render_explanation(answer))
    else:
        print(render_statement(answer))
    return 0
