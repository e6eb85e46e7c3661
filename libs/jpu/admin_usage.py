"""`jpu-admin explain-usage LAB` and `jpu-admin usage-statement` (issue 14 item 4, SPEC F5).

For auditors: every charge that makes up a lab's usage, and a statement per lab and period like
Slurm's `sreport`. Both read the log from NATS (the configuration's `nats_url`, or `--nats`) and
answer with jpu.explain.usage — the same answer `GET /v1/admin/labs/{lab}/usage-explain` and
`GET /v1/admin/usage-statement` give. The log is read whole (a lab's usage is every charge ever);
`--db` reads the same lines from the `usage_ledger` projection instead (PostgreSQL: the
configuration's `database_url` or `--database-url`), by index, for a long log — the projection
is a fold of the log that `python -m jpu.replay` audits. Times (`--since`, `--until`, `--at`)
are epoch seconds or ISO 8601 (`2026-12-01`, `2026-12-01T09:00`, with an offset or local time).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import msgspec

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


async def _book(args: argparse.Namespace, config: Config) -> Ledger:
    if args.db:
        from jpu.store.db import create_pool, migrate
        from jpu.store.projections.usage_ledger import read_ledger as from_db

        pool = await create_pool(args.database_url or config.database_url)
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

    bus = await EventBus.connect(
        args.nats or config.nats_url,
        stream=config.stream_name,
        prefix=config.subject_prefix,
        name="jpu-admin",
    )
    try:
        return await read_ledger(bus)
    finally:
        await bus.close()


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
    answer = asyncio.run(_answer(args))
    if args.json:
        print(json.dumps(msgspec.to_builtins(answer), indent=2, sort_keys=True))
    elif isinstance(answer, UsageExplanation):
        print(render_explanation(answer))
    else:
        print(render_statement(answer))
    return 0
