"""Simulator workload: JSONL, one job per line (SPEC §10).

Required keys: `id, lab, user, submit_s, num_gpus, duration_s`; optional `tiers`, `min_vram_gb`,
`peak_vram_gb` (an attempt on a tier with less VRAM ends in a GPU OOM after `oom_after_s`),
`oom_after_s` (default 60), `cancel_s` (seconds after submission), `time_limit_s`,
`dependency` (Q8, Slurm syntax on workload ids), `array` (Q7: Slurm's syntax, e.g. "0-9%2"; the
line is one submit and each task a job of its own, `<id>_<index>`), `hold` with `release_s` (Q9:
submitted held, released by its owner `release_s` seconds after submission; a workload hold
always has a release time, so every job of a run ends).
A bad line is reported with its line number, never silently skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

from jpu.domain import arrays

DEFAULT_OOM_AFTER_S = 60.0


class WorkloadError(ValueError):
    """A workload file that cannot be simulated; the message names the line."""


class WorkloadJob(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str
    lab: str
    user: str
    submit_s: float
    num_gpus: int
    duration_s: float
    tiers: list[str] | None = None
    min_vram_gb: int | None = None
    peak_vram_gb: float | None = None
    oom_after_s: float = DEFAULT_OOM_AFTER_S
    cancel_s: float | None = None
    time_limit_s: float | None = None
    dependency: str | None = None  # Q8, Slurm syntax on workload ids (afterok:ID, singleton)
    array: str | list[int] | None = None  # Q7: "0-99%8", "0-9:2", "1,5,9" or indices
    hold: bool = False  # Q9: submitted held ...
    release_s: float | None = None  # ... and released this many seconds after submission


_decoder = msgspec.json.Decoder(WorkloadJob)


def _check(job: WorkloadJob) -> None:
    if not job.id:
        raise ValueError("id must not be empty")
    if job.submit_s < 0 or job.duration_s < 0:
        raise ValueError("submit_s and duration_s must be >= 0")
    if not 1 <= job.num_gpus <= 8:  # SPEC Q1
        raise ValueError(f"num_gpus must be 1..8, got {job.num_gpus}")
    if job.oom_after_s < 0 or (job.cancel_s is not None and job.cancel_s < 0):
        raise ValueError("oom_after_s and cancel_s must be >= 0")
    if job.hold != (job.release_s is not None):
        raise ValueError("hold and release_s go together (a held job is released at release_s)")
    if job.release_s is not None and job.release_s < 0:
        raise ValueError("release_s must be >= 0")
    if job.array is not None:
        try:
            arrays.parse(job.array, arrays.MAX_INDEX + 1)  # Q7, as intake parses it
        except arrays.ArrayProblem as e:
            raise ValueError(f"array: {e}") from e


def parse_lines(lines: Iterable[bytes | str], source: str = "<workload>") -> Iterator[WorkloadJob]:
    """Decode and check each non-blank line; ids must be unique."""
    seen: set[str] = set()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            job = _decoder.decode(line)
            _check(job)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
            raise WorkloadError(f"{source}:{lineno}: {e}") from e
        if job.id in seen:
            raise WorkloadError(f"{source}:{lineno}: duplicate job id {job.id!r}")
        seen.add(job.id)
        yield job


def load_workload(path: str | Path) -> list[WorkloadJob]:
    """All jobs of a workload file, sorted by (submit_s, file order)."""
    p = Path(path)
    try:
        with p.open("rb") as f:
            jobs = list(parse_lines(f, str(p)))
    except OSError as e:
        raise WorkloadError(f"{p}: {e}") from e
    return sorted(jobs, key=lambda j: j.submit_s)  # stable: ties keep file order


def dump_jobs(jobs: Iterable[WorkloadJob], path: str | Path) -> int:
    """Write jobs as JSONL (defaults omitted); returns the number written."""
    enc = msgspec.json.Encoder()
    n = 0
    with Path(path).open("wb") as f:
        for job in jobs:
            f.write(enc.encode(_compact(job)))
            f.write(b"\n")
            n += 1
    return n


def _compact(job: WorkloadJob) -> dict[str, object]:
    d = msgspec.structs.asdict(job)
    if d["oom_after_s"] == DEFAULT_OOM_AFTER_S:
        del d["oom_after_s"]
    if not d["hold"]:
        del d["hold"]
    return {k: v for k, v in d.items() if v is not None}
