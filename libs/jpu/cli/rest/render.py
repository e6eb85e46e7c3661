"""Tables for people (SPEC U1): times, durations and usage as the CLI prints them. Pure."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any


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
