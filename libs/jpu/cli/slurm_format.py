"""The API's job dicts as Slurm's commands print them (SPEC U1, U6). Pure.

`jpu squeue`, `jpu sacct` and `jpu scontrol show job` read a job as the API gives it (an entry
of `GET /v1/queue`, a job of `GET /v1/jobs[/{id}]`) and print it with Slurm's names: its
states (`PENDING`/`PD`, …), its time formats (`1:02:03`, `2026-12-04T10:00:00`), squeue's
`%[.][width]X` fields and sacct's `--format=Field[%width]` columns. A tier is the partition, a
lab the account; a job is one node and one task (U6), its GPUs `gpu:N`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

Job = Mapping[str, Any]

# SPEC §1.4 → Slurm's (long, short) state. DISPATCHED holds its GPUs and is starting: Slurm's
# RUNNING, as `jpu queue -t R` takes it; CANCELLING is Slurm's COMPLETING (the job still ends).
_STATES: Final = {
    "PERSONAL_QUEUE_WAIT": ("PENDING", "PD"),
    "GLOBAL_QUEUE_WAIT": ("PENDING", "PD"),
    "RESERVING": ("PENDING", "PD"),
    "DISPATCHED": ("RUNNING", "R"),
    "RUNNING": ("RUNNING", "R"),
    "CANCELLING": ("COMPLETING", "CG"),
    "COMPLETED": ("COMPLETED", "CD"),
    "FAILED": ("FAILED", "F"),
    "CANCELLED": ("CANCELLED", "CA"),
}
# a FAILED job's end reason (jpu.domain.ending) that Slurm names as a state of its own
_FAILED_AS: Final = {
    "TIMEOUT": ("TIMEOUT", "TO"),
    "OOM": ("OUT_OF_MEMORY", "OOM"),
    "HOST_OOM": ("OUT_OF_MEMORY", "OOM"),
    "NODE_FAIL": ("NODE_FAIL", "NF"),
    "PREEMPTED": ("PREEMPTED", "PR"),
}


def slurm_state(job: Job) -> tuple[str, str]:
    """The job's state as Slurm names it, long and short (`PENDING`, `PD`)."""
    state = str(job.get("state") or "")
    if state == "FAILED":
        reason = str(job.get("reason") or "").split(":")[0]
        if reason in _FAILED_AS:
            return _FAILED_AS[reason]
    return _STATES.get(state, (state or "UNKNOWN", state[:2] or "?"))


def duration(seconds: float | None) -> str:
    """Slurm's elapsed/limit format: `M:SS`, `H:MM:SS`, `D-HH:MM:SS`."""
    if seconds is None:
        return "0:00"
    s = max(0, int(seconds))
    days, s = divmod(s, 86400)
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    if days:
        return f"{days}-{h:02d}:{m:02d}:{sec:02d}"
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def limit(seconds: float | None) -> str:
    return "UNLIMITED" if seconds is None else duration(seconds)


def stamp(ts: float | None, none: str = "N/A") -> str:
    """Slurm's time stamp, local time: `2026-12-04T10:00:00`."""
    return none if ts is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(ts))


def elapsed(job: Job, now: float) -> float:
    """Run time: the API's `elapsed_s` (queue entries), else from start to end (or now)."""
    if job.get("elapsed_s") is not None:
        return float(job["elapsed_s"])
    start = job.get("started_at")
    if start is None:
        return 0.0
    return max(0.0, float(job.get("ended_at") or now) - float(start))


def job_id(job: Job) -> str:
    return str(job.get("job_id") or job.get("id") or "")


def partition(job: Job) -> str:
    """The tier it runs on, else the tiers it may run on (`any`: no tier asked for)."""
    placement = job.get("placement")
    if placement:
        return str(placement["tier"])
    tiers = job.get("tiers")
    return ",".join(tiers) if tiers else "any"


def node(job: Job) -> str:
    placement = job.get("placement")
    return str(placement["node"]) if placement else ""


def reason(job: Job) -> str:
    """squeue's REASON: the pending reason (D7), `None` once running."""
    return str(job.get("pending_reason") or "None")


def exit_code(job: Job) -> str:
    """sacct's `code:signal`; a cancelled job was killed by SIGTERM (Slurm's 0:15)."""
    code = job.get("exit_code")
    if code is None:
        return "0:15" if job.get("state") == "CANCELLED" else "0:0"
    code = int(code)
    return f"0:{-code}" if code < 0 else f"{code}:0"


# --- squeue ----------------------------------------------------------------------------------

Value = Callable[[Job, float], str]
_SQUEUE: Final[dict[str, tuple[str, Value]]] = {
    "i": ("JOBID", lambda j, _n: job_id(j)),
    "A": ("JOBID", lambda j, _n: job_id(j)),
    "j": ("NAME", lambda j, _n: str(j.get("name") or "")),
    "u": ("USER", lambda j, _n: str(j.get("user") or "")),
    "a": ("ACCOUNT", lambda j, _n: str(j.get("lab") or "")),
    "g": ("GROUP", lambda j, _n: str(j.get("lab") or "")),
    "t": ("ST", lambda j, _n: slurm_state(j)[1]),
    "T": ("STATE", lambda j, _n: slurm_state(j)[0]),
    "M": ("TIME", lambda j, n: duration(elapsed(j, n))),
    "l": ("TIME_LIMIT", lambda j, _n: limit(j.get("time_limit_s"))),
    "L": ("TIME_LEFT", lambda j, n: _left(j, n)),
    "D": ("NODES", lambda _j, _n: "1"),
    "C": ("CPUS", lambda j, _n: str(j.get("cpus") or 1)),
    "R": ("NODELIST(REASON)", lambda j, _n: node(j) or f"({reason(j)})"),
    "r": ("REASON", lambda j, _n: reason(j)),
    "N": ("NODELIST", lambda j, _n: node(j)),
    "P": ("PARTITION", lambda j, _n: partition(j)),
    "b": ("TRES_PER_NODE", lambda j, _n: f"gpu:{j.get('num_gpus') or 1}"),
    "V": ("SUBMIT_TIME", lambda j, _n: stamp(j.get("submitted_at"))),
    "S": ("START_TIME", lambda j, _n: stamp(j.get("started_at") or j.get("estimated_start"))),
    "e": ("END_TIME", lambda j, _n: stamp(j.get("ended_at"))),
    "E": ("DEPENDENCY", lambda j, _n: str(j.get("dependency") or "(null)")),
    "Q": ("PRIORITY", lambda j, _n: str(j.get("rank") or "")),
    "q": ("QOS", lambda _j, _n: "normal"),
    "k": ("COMMENT", lambda _j, _n: "(null)"),
    "Z": ("WORK_DIR", lambda j, _n: str(j.get("chdir") or "")),
}
# squeue's own, with the id's 18 widened to the 24 hex digits of an id here
DEFAULT_SQUEUE: Final = "%.24i %.9P %.8j %.8u %.2t %.10M %.6D %R"
LONG_SQUEUE: Final = "%.24i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R"  # squeue -l
_WHOLE: Final = frozenset("iA")  # an id is never cut: `ID_12` cut to `ID_1` is another job


def _left(job: Job, now: float) -> str:
    if job.get("time_limit_s") is None:
        return "UNLIMITED"
    return duration(float(job["time_limit_s"]) - elapsed(job, now))


@dataclass(frozen=True)
class Field:
    """One `%[.][-][width]X` of a squeue format; `letter` None: literal `text`."""

    text: str
    letter: str | None = None
    width: int | None = None
    right: bool = False


_SPEC = re.compile(r"%(\.?)(-?)(\d*)([A-Za-z%])")


def parse_format(fmt: str) -> list[Field]:
    """squeue's `-o` format into fields; ValueError names an unknown `%X`."""
    out: list[Field] = []
    pos = 0
    for m in _SPEC.finditer(fmt):
        if m.start() > pos:
            out.append(Field(fmt[pos : m.start()]))
        pos = m.end()
        right, _left_mark, width, letter = m.groups()
        if letter == "%":
            out.append(Field("%"))
            continue
        if letter not in _SQUEUE:
            known = " ".join(f"%{k}" for k in _SQUEUE)
            raise ValueError(f"format field %{letter} is not supported; known: {known}")
        out.append(Field("", letter, int(width) if width else None, bool(right)))
    if pos < len(fmt):
        out.append(Field(fmt[pos:]))
    return out


def _fit(text: str, f: Field, cut: bool = True) -> str:
    """squeue's width: pad to it (right-justified with `.`) and cut what is longer."""
    if f.width is None:
        return text
    text = text[: f.width] if cut else text
    return text.rjust(f.width) if f.right else text.ljust(f.width)


def squeue_line(fields: Sequence[Field], job: Job | None, now: float) -> str:
    """One line of squeue's output; `job` None: the header."""
    parts = []
    for f in fields:
        if f.letter is None:
            parts.append(f.text)
            continue
        title, value = _SQUEUE[f.letter]
        parts.append(_fit(title if job is None else value(job, now), f, f.letter not in _WHOLE))
    return "".join(parts).rstrip()


def squeue(jobs: Sequence[Job], fmt: str, now: float, header: bool = True) -> str:
    fields = parse_format(fmt)
    lines = [squeue_line(fields, None, now)] if header else []
    lines += [squeue_line(fields, j, now) for j in jobs]
    return "\n".join(lines)


# --- sacct -----------------------------------------------------------------------------------

_SACCT: Final[dict[str, Value]] = {
    "jobid": lambda j, _n: job_id(j),
    "jobidraw": lambda j, _n: job_id(j),
    "jobname": lambda j, _n: str(j.get("name") or ""),
    "user": lambda j, _n: str(j.get("user") or ""),
    "group": lambda j, _n: str(j.get("lab") or ""),
    "account": lambda j, _n: str(j.get("lab") or ""),
    "partition": lambda j, _n: partition(j),
    "state": lambda j, _n: slurm_state(j)[0],
    "exitcode": lambda j, _n: exit_code(j),
    "elapsed": lambda j, n: duration(elapsed(j, n)),
    "elapsedraw": lambda j, n: str(int(elapsed(j, n))),
    "timelimit": lambda j, _n: limit(j.get("time_limit_s")),
    "submit": lambda j, _n: stamp(j.get("submitted_at"), "Unknown"),
    "start": lambda j, _n: stamp(j.get("started_at"), "Unknown"),
    "end": lambda j, _n: stamp(j.get("ended_at"), "Unknown"),
    "nnodes": lambda _j, _n: "1",
    "ntasks": lambda _j, _n: "1",
    "alloccpus": lambda j, _n: str(j.get("cpus") or 1),
    "nodelist": lambda j, _n: node(j) or "None assigned",
    "allocgres": lambda j, _n: f"gpu:{j.get('num_gpus') or 1}",
    "reqgres": lambda j, _n: f"gpu:{j.get('num_gpus') or 1}",
    "alloctres": lambda j, _n: f"billing=1,gres/gpu={j.get('num_gpus') or 1},node=1",
    "reqtres": lambda j, _n: f"billing=1,gres/gpu={j.get('num_gpus') or 1},node=1",
    "workdir": lambda j, _n: str(j.get("chdir") or ""),
    "reason": lambda j, _n: str(j.get("reason") or j.get("pending_reason") or "None"),
    "restarts": lambda j, _n: str(max(0, int(j.get("attempt") or 1) - 1)),
    "qos": lambda _j, _n: "normal",
    "cluster": lambda _j, _n: "jpu",
}
# sacct's column widths (its `-e` list), right-justified unless `%-N`; a job id here is 24 hex
# digits (an array task's `_K` more), not Slurm's number: its column fits it whole
_SACCT_WIDTH: Final = {
    "jobid": 26, "jobidraw": 26, "exitcode": 8, "submit": 19, "start": 19, "end": 19,
    "nnodes": 8, "ntasks": 8, "nodelist": 15, "elapsedraw": 10,
}  # fmt: skip
DEFAULT_SACCT: Final = "JobID,JobName,Partition,Account,AllocCPUS,State,ExitCode"
SACCT_FIELDS: Final = tuple(_SACCT)


@dataclass(frozen=True)
class Column:
    key: str  # lower-case name
    title: str  # as the user wrote it
    width: int
    left: bool = False


def parse_sacct_format(fmt: str) -> list[Column]:
    """`JobID,JobName%30,State` → columns; ValueError names an unknown field."""
    out = []
    for word in (w.strip() for w in fmt.split(",") if w.strip()):
        name, _, width = word.partition("%")
        key = name.lower()
        if key not in _SACCT:
            raise ValueError(f"--format: unknown field {name!r}; known: {','.join(SACCT_FIELDS)}")
        left = width.startswith("-")
        w = int(width.lstrip("-")) if width.lstrip("-").isdigit() else _SACCT_WIDTH.get(key, 10)
        out.append(Column(key, name, w, left))
    return out


def _cell(text: str, col: Column) -> str:
    if len(text) > col.width and col.key not in ("jobid", "jobidraw"):  # an id is never cut
        # sacct marks a cut value with '+'
        text = text[: col.width - 1] + "+"
    return text.ljust(col.width) if col.left else text.rjust(col.width)


def sacct(
    jobs: Sequence[Job], fmt: str, now: float, *, header: bool = True, sep: str | None = None,
    trailing: bool = False,
) -> str:  # fmt: skip
    """sacct's table, or with `sep` (`-p`/`-P`) its parsable lines (`trailing`: `-p`'s `|`)."""
    cols = parse_sacct_format(fmt)
    rows = [[_SACCT[c.key](j, now) for c in cols] for j in jobs]
    lines = []
    if sep is not None:
        end = sep if trailing else ""
        if header:
            lines.append(sep.join(c.title for c in cols) + end)
        lines += [sep.join(r) + end for r in rows]
        return "\n".join(lines)
    if header:
        lines.append(" ".join(_cell(c.title, c) for c in cols))
        lines.append(" ".join("-" * c.width for c in cols))
    lines += [" ".join(_cell(v, c) for v, c in zip(r, cols, strict=True)) for r in rows]
    return "\n".join(lines)


# --- scontrol show job -----------------------------------------------------------------------


def scontrol_show(job: Job, now: float, *, one_line: bool = False) -> str:
    """`scontrol show job`: Slurm's `Key=Value` groups, one group a line (`-o`: one line)."""
    long_state, _ = slurm_state(job)
    n = job.get("num_gpus") or 1
    started = job.get("started_at")
    end = job.get("ended_at")
    if end is None and started is not None and job.get("time_limit_s") is not None:
        end = float(started) + float(job["time_limit_s"])  # Slurm shows the limit's end
    groups = [
        [f"JobId={job_id(job)}", f"JobName={job.get('name') or ''}"],
        [f"UserId={job.get('user') or ''}", f"GroupId={job.get('lab') or ''}"],
        [f"Priority={job.get('rank') or 0}", f"Account={job.get('lab') or ''}", "QOS=normal"],
        [f"JobState={long_state}", f"Reason={_why(job)}",
         f"Dependency={job.get('dependency') or '(null)'}"],
        ["Requeue=0", f"Restarts={max(0, int(job.get('attempt') or 1) - 1)}", "BatchFlag=1",
         f"ExitCode={exit_code(job)}", f"Held={'Yes' if job.get('held') else 'No'}"],
        [f"RunTime={duration(elapsed(job, now))}", f"TimeLimit={limit(job.get('time_limit_s'))}"],
        [f"SubmitTime={stamp(job.get('submitted_at'))}",
         f"EligibleTime={stamp(job.get('queue_entered_at'))}"],
        [f"StartTime={stamp(started or job.get('estimated_start') or None, 'Unknown')}",
         f"EndTime={stamp(end, 'Unknown')}"],
        [f"Partition={partition(job)}", f"BatchHost={node(job) or '(null)'}"],
        [f"NodeList={node(job) or '(null)'}", "NumNodes=1", "NumTasks=1"],
        [f"TRES=gres/gpu={n},node=1", f"Gres=gpu:{n}"],
        [f"WorkDir={job.get('chdir') or ''}"],
    ]  # fmt: skip
    if job.get("array_id"):
        groups[0] += [f"ArrayJobId={job['array_id']}", f"ArrayTaskId={job.get('array_task')}"]
    if job.get("backend_job_id"):
        groups[-1].append(f"BackendJobId={job['backend_job_id']}")
    if one_line:
        return " ".join(" ".join(g) for g in groups)
    return "\n".join(("   " if i else "") + " ".join(g) for i, g in enumerate(groups))


def _why(job: Job) -> str:
    if job.get("state") in ("COMPLETED", "FAILED", "CANCELLED"):
        r = job.get("reason")
        return "None" if r in (None, "cancelled") else str(r).replace(" ", "_")
    return reason(job)
