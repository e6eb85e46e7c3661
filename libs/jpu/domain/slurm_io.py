"""SPEC U6, the honoured half of sbatch's I/O options. Pure: filename patterns of `-o/-e`, the
`--open-mode`, and `--signal=[{R|B}:]SIG[@T]`.

The backends (jpu.backends.supervise) act on what this decides: the job's stdout/stderr are
copied into the expanded files, opened as the job's account relative to its working directory,
and the signal is sent T seconds before the time limit.
"""

from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass
from typing import Final, Literal

DEFAULT_SIGNAL_TIME_S: Final = 60  # Slurm's default T of --signal
MAX_SIGNAL_TIME_S: Final = 65535  # Slurm's own bound on T
OpenMode = Literal["truncate", "append"]
_PATTERN: Final = re.compile(r"%(\d*)([jJxuAaNn%sto])?")
_SIGNAL: Final = re.compile(r"^(?:([RB]{1,2}):)?([A-Za-z0-9+]+)(?:@(\d+))?$")


@dataclass(frozen=True)
class PatternFacts:
    """What `%` letters stand for in one attempt of one job (Slurm's meanings, this platform's
    values: %j is the platform's job id, %A the array's id, %N the node)."""

    job_id: str
    name: str
    user: str
    node: str
    array_job_id: str | None = None
    array_task_id: int | None = None


def expand(pattern: str, facts: PatternFacts) -> str:
    """A `-o/-e` filename with Slurm's `%` patterns replaced (`%4a` zero-pads to 4 digits; an
    unknown letter is kept as written, as sbatch does). Outside an array, %A is the job id and
    %a is "4294967294" in Slurm: here %a is "0" would mislead, so it is Slurm's value too."""

    def one(m: re.Match[str]) -> str:
        width, letter = m.group(1), m.group(2)
        if letter is None:
            return m.group(0)
        if letter == "%":
            return "%" if not width else m.group(0)
        value = _letter(letter, facts)
        if value is None:
            return m.group(0)
        if width and value.isdigit():
            value = value.zfill(min(int(width), 10))
        return value

    return _PATTERN.sub(one, pattern)


def _letter(letter: str, f: PatternFacts) -> str | None:
    in_array = f.array_job_id is not None and f.array_task_id is not None
    if letter == "j":
        return f.job_id
    if letter == "J":  # job id.step id: the batch step has none, as in Slurm
        return f.job_id
    if letter == "x":
        return f.name
    if letter == "u":
        return f.user
    if letter in ("N", "n"):
        return f.node if letter == "N" else "0"
    if letter == "A":
        return f.array_job_id if in_array and f.array_job_id else f.job_id
    if letter == "a":
        return str(f.array_task_id) if in_array else "4294967294"
    if letter in ("s", "t"):  # step id / task id: the batch script is task 0 of no step
        return "batch" if letter == "s" else "0"
    return None


def open_mode(value: str | None) -> OpenMode:
    """`--open-mode`: `append` (or `a…`) appends; anything else (the default) truncates."""
    return "append" if value is not None and value.strip().lower().startswith("a") else "truncate"


@dataclass(frozen=True)
class SignalSpec:
    """`--signal`: which signal, how many seconds before the limit, and to whom."""

    signum: int
    before_s: int
    batch_only: bool  # B: the batch shell only; else the job's processes (Slurm's steps)

    @property
    def name(self) -> str:
        return _signal.Signals(self.signum).name[3:]


def parse_signal(value: str) -> SignalSpec:
    """`[{R|B}:]SIG[@T]`: SIG by name (`USR1`, `SIGUSR1`) or number, T in seconds (default
    60). ValueError names what is wrong."""
    m = _SIGNAL.match(value.strip())
    if not m:
        raise ValueError(f"--signal={value}: expected [{{R|B}}:]SIG[@TIME], e.g. B:USR1@60")
    flags, sig, when = m.group(1) or "", m.group(2), m.group(3)
    signum = _signum(sig)
    if signum is None:
        raise ValueError(f"--signal={value}: unknown signal {sig!r}")
    before = int(when) if when is not None else DEFAULT_SIGNAL_TIME_S
    if before > MAX_SIGNAL_TIME_S:
        raise ValueError(f"--signal={value}: at most {MAX_SIGNAL_TIME_S} s before the limit")
    return SignalSpec(signum=signum, before_s=before, batch_only="B" in flags)


def _signum(sig: str) -> int | None:
    if sig.isdigit():
        n = int(sig)
        return n if n in {s.value for s in _signal.Signals} else None
    name = sig.upper()
    name = name if name.startswith("SIG") else "SIG" + name
    try:
        return int(_signal.Signals[name])
    except KeyError:
        return None


def signal_delay(spec: SignalSpec, time_limit_s: float | None) -> float | None:
    """Seconds after the start to send the signal; None without a time limit (Slurm sends it
    only before a limit). A T above the limit sends it at once."""
    if time_limit_s is None or time_limit_s <= 0:
        return None
    return max(0.0, time_limit_s - spec.before_s)


def files(
    output: str | None, error: str | None, facts: PatternFacts
) -> tuple[str | None, str | None]:
    """(stdout file, stderr file) as expanded; stderr goes to the stdout file when `-e` is not
    given (sbatch's default), and nowhere extra when neither is."""
    out = expand(output, facts) if output else None
    err = expand(error, facts) if error else out
    return out, err
