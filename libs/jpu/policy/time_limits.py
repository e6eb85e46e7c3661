"""sbatch's `--time` (SPEC U1, U6): Slurm's time-limit syntax → seconds. Pure; the CLI's flag
and its `#SBATCH` directives read a limit with it before the API gets `time_limit_s`."""

from __future__ import annotations

import re

_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time_limit(text: str) -> int | None:
    """sbatch `--time`: "M", "M:S", "H:M:S", "D-H", "D-H:M", "D-H:M:S" → seconds;
    "UNLIMITED"/"infinite" → None (no limit). Raises ValueError on anything else or zero.
    The CLI's `--time` and `#SBATCH --time` use it; the console's form (console/time.js)
    follows the same rule: both run the cases of tests/fixtures/time_limits.json."""
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
