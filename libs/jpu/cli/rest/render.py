"""Tables for people (SPEC U1) and sbatch-style time limits. Pure."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time_limit(text: str) -> int | None:
    """sbatch `--time`: "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S" → seconds;
    "UNLIMITED"/"infinite" → None (no limit). Raises ValueError on anything else or zero.
    The console's form (console/time.js) follows the same rule: both run the cases of
    tests/fixtures/time_limits.json."""
    t = text.strip()
    if t.lower() in ("unlimited", "infinite"):
        return None
    m = _TIME.match(t)
    if m is None:
        raise ValueError(f"time limit {text!r}: use minutes, MM:SS, HH:MM:SS or D-HH[:MM[:SS]]")
    days, a, b, c = (int(g) if g is not None else None for g in m.groups())
    if days is None:
        parts = [x for x in (a, b, c) if x is not None]
        if len(parts) == 1:
            seconds = parts[0] * 60  # minutes
        elif len(parts) == 2:
            seconds = parts[0] * 60 + parts[1]  # minutes:seconds
        else:
            seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
    else:
        seconds = days * 86400 + (a or 0) * 3600 + (b or 0) * 60 + (c or 0)
    if seconds <= 0:
        raise ValueError(f"time limit {text!r} must be positive")
    return seconds


def fmt_duration(seconds: float | None) -> str:
    """Like squeue's TIME: [D-]HH:MM:SS."""
    if seconds is None:
        return "-"
    s = round(seconds)
    days, s = divmod(s, 86400)
    out = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{out}" if days else out


def fmt_ts(ts: float | None) -> str:
    if ts is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def fmt_usage(value: float | None) -> str:
    """TFLOP-s with thousands separators (F1: one 4090 hour = 297,360)."""
    return "-" if value is None else f"{value:,.0f}"


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value) if value else "-"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Left-aligned columns, two spaces apart, header first (like squeue)."""
    text = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    for row in text:
        lines.append("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """`key: value` lines for one object (`jpu show`)."""
    width = max((len(k) for k, _ in pairs), default=0)
    return "\n".join(f"{k.rjust(width)}: {cell(v)}" for k, v in pairs)
