"""An array's tasks as one line for people (SPEC Q7), like squeue's `ID_[0-99]`. Pure.

A task's job id is `<array id>_<index>` (jpu.domain.arrays); rows of the same array are folded
into one whose id names the indices and the `%N` throttle when it has one (`ID_[0-3,7]`,
`ID_[0-99%8]`, the API's `array_throttle`) and whose state counts the tasks per state
(`COMPLETED:96,RUNNING:4`). Numbers that add up (GPU-seconds, usage) are summed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from jpu.domain.arrays import split_task_id
from jpu.domain.states import in_order

Row = dict[str, Any]


def ranges(indices: Iterable[int]) -> str:
    """[0, 1, 2, 5, 7, 8] → "0-2,5,7-8"."""
    parts: list[str] = []
    run: list[int] = []
    for k in sorted(indices):
        if run and k == run[-1] + 1:
            run.append(k)
            continue
        if run:
            parts.append(_run(run))
        run = [k]
    if run:
        parts.append(_run(run))
    return ",".join(parts)


def _run(run: list[int]) -> str:
    return str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}"


def state_counts(states: Iterable[str]) -> str:
    """ "COMPLETED:96,RUNNING:4", in lifecycle order."""
    counts: dict[str, int] = {}
    for s in states:
        counts[s] = counts.get(s, 0) + 1
    return ",".join(f"{s}:{counts[s]}" for s in in_order(counts))


def group(
    rows: list[Row], id_key: str, *, keep: Callable[[Row], bool] = lambda r: True
) -> list[Row]:
    """`rows` with the tasks of each array (those `keep` accepts) folded into one row, at the
    place of its first task; every other row as it is."""
    tasks: dict[str, list[Row]] = {}
    for r in rows:
        task = split_task_id(str(r[id_key]))
        if task is not None and keep(r):
            tasks.setdefault(task[0], []).append(r)
    out: list[Row] = []
    for r in rows:
        task = split_task_id(str(r[id_key]))
        members = tasks.get(task[0], []) if task is not None and keep(r) else []
        if len(members) <= 1:
            out.append(r)  # a single job, or an array's only task to show here
        elif members[0] is r and task is not None:
            out.append(_folded(task[0], members, id_key))
    return out


def _folded(array_id: str, members: list[Row], id_key: str) -> Row:
    indices = [split_task_id(str(m[id_key])) for m in members]
    row = dict(members[0])
    throttle = members[0].get("array_throttle")
    cap = f"%{throttle}" if throttle else ""  # Q7: at most N tasks hold slots at once
    row[id_key] = f"{array_id}_[{ranges(i[1] for i in indices if i is not None)}{cap}]"
    row["state"] = state_counts(str(m.get("state")) for m in members)
    for key in ("gpu_seconds", "usage_charged"):
        values = [m.get(key) for m in members if m.get(key) is not None]
        row[key] = sum(values) if values else None
    for key in ("exit_code", "placement", "attempt", "rank", "elapsed_s"):
        row[key] = None  # one per task: see the task itself (`jpu show ID_7`)
    return row
