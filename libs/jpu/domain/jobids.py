"""Job ids as a Slurm user types them (SPEC U8). Pure.

`ID` (a job or an array, whole or any unique prefix), `ID_K` (task K of an array whose id
starts with ID) and, for cancel/hold/release, `ID_[2-4,7]` (tasks 2, 3, 4 and 7). Resolving a
prefix is the API's (it knows which jobs the caller may see); this module only reads the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

MAX_RANGE_TASKS: Final = 10_000  # tasks one `ID_[…]` may name (an array has at most 1000, Q7)
# an id or prefix: what job ids are made of (hex, letters, digits, '-', '.')
_ID: Final = r"[A-Za-z0-9.-]+"
_ONE: Final = re.compile(rf"^(?P<id>{_ID})(?:_(?P<task>\d+))?$")
_RANGE: Final = re.compile(rf"^(?P<id>{_ID})_\[(?P<spec>[0-9,\-]+)\]$")


@dataclass(frozen=True)
class JobRef:
    """`prefix`: the job's or array's id as given (whole or a prefix); `tasks`: None for the
    job (or the whole array) itself, else the array task indices named."""

    prefix: str
    tasks: tuple[int, ...] | None = None

    def ids(self) -> list[str]:
        """As the API takes them, one per job: `PREFIX` or `PREFIX_K` each."""
        if self.tasks is None:
            return [self.prefix]
        return [f"{self.prefix}_{k}" for k in self.tasks]


def parse(text: str, *, ranges: bool = False) -> JobRef:
    """`ID`, `ID_K` and (with `ranges`) `ID_[2-4,7]`; ValueError saying what is accepted."""
    t = text.strip()
    m = _ONE.match(t)
    if m is not None:
        task = m["task"]
        return JobRef(m["id"], None if task is None else (int(task),))
    r = _RANGE.match(t)
    if r is not None:
        if not ranges:
            raise ValueError(f"{text!r}: one job here: ID or ID_TASK (a range only for cancel, "
                             "hold and release)")  # fmt: skip
        return JobRef(r["id"], _tasks(r["spec"], text))
    what = "ID, ID_TASK or ID_[2-4,7]" if ranges else "ID or ID_TASK"
    raise ValueError(f"{text!r} is not a job id: use {what} (any unique prefix of the ID)")


def _tasks(spec: str, text: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in spec.split(","):
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(f"{text!r}: tasks are K, K-L, joined by ',' (e.g. [2-4,7])")
        first, last = int(lo), int(hi) if dash else int(lo)
        if last < first:
            raise ValueError(f"{text!r}: {part} goes backwards")
        if len(out) + last - first + 1 > MAX_RANGE_TASKS:
            raise ValueError(f"{text!r}: at most {MAX_RANGE_TASKS} tasks at once")
        out.extend(range(first, last + 1))
    return tuple(dict.fromkeys(out))
