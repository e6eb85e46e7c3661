"""One attempt's files and status on the Slurm backend (SPEC X2, X3, X6, X7).

* the output directory, job.sh and fresh stdout/stderr, made as in the local backend
  (outputs.py: never following a name the user controls);
* the job's comment, which carries what a re-adopting agent needs and Slurm keeps for us
  (the isolation the job got, its exact time limit): "jpu isolation=netns limit=1.5";
* a record rebuilt from Slurm alone, for an attempt another agent (or a lost data dir) started;
* Slurm's view + our record → the contract's BackendStatus.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from jpu.backends.accounts import Account
from jpu.backends.base import BackendStatus, LaunchSpec
from jpu.backends.outputs import create_private, open_output_dir, read_tail
from jpu.backends.slurm.parse import SlurmJob, decode_wait_status
from jpu.backends.slurm.records import SlurmRecord
from jpu.backends.slurm.submit import NAME_PREFIX


def prepare_output(spec: LaunchSpec, account: Account) -> None:
    """JOB_OUTPUT_DIR (0700, the user's), job.sh (X3) and fresh stdout/stderr that Slurm
    appends to as the user."""
    dir_fd = open_output_dir(Path(spec.output_dir), account, levels=2)
    try:
        os.close(create_private(dir_fd, "job.sh", account, spec.command.encode()))
        os.close(create_private(dir_fd, "stdout", account))
        os.close(create_private(dir_fd, "stderr", account))
    finally:
        os.close(dir_fd)


def comment_for(isolation: str, time_limit_s: float | None) -> str:
    limit = f" limit={time_limit_s:g}" if time_limit_s else ""
    return f"jpu isolation={isolation}{limit}"


def parse_comment(comment: str) -> tuple[str, float | None]:
    fields = dict(w.split("=", 1) for w in comment.split() if "=" in w)
    try:
        limit = float(fields["limit"]) if "limit" in fields else None
    except ValueError:
        limit = None
    return fields.get("isolation", "none"), limit


def adopt(job: SlurmJob) -> SlurmRecord | None:
    """Our record of an attempt known only to Slurm (its name says which job and attempt)."""
    job_id, _, attempt = job.name.removeprefix(NAME_PREFIX).rpartition("-")
    if not job.name.startswith(NAME_PREFIX) or not job_id or not attempt.isdigit():
        return None
    isolation, limit = parse_comment(job.comment)
    return SlurmRecord(
        name=job.name, job_id=job_id, attempt=int(attempt), user="", account=job.user,
        node=job.node or "", output_dir=job.workdir, isolation=isolation, time_limit_s=limit,
        slurm_id=job.job_id, submitted_at=job.submit_time or time.time(),
    )  # fmt: skip


def never_ran(job: SlurmJob) -> bool:
    """sbatch refused it (Slurm still keeps a FAILED record of the refused request)."""
    return job.state == "FAILED" and job.reason == "BadConstraints" and job.node is None


def status_of(
    job: SlurmJob, record: SlurmRecord | None, seen_end: float | None, tail_bytes: int
) -> BackendStatus:
    """Slurm times are whole seconds: `started_at` is Slurm's (≤ the real start); `ended_at` is
    when the end was first seen, capped at Slurm's end + 1 s (≥ the real end)."""
    state, terminal = job.backend_state, job.terminal
    if record is not None and record.intent is not None and terminal:
        state = "CANCELLED" if record.intent == "cancel" else "TIMEOUT"  # our kill, our word
    exit_code, sig = decode_wait_status(job.exit_status) if terminal else (None, None)
    ended_at = None
    if terminal and job.end_time is not None:
        seen = seen_end if seen_end is not None else time.time()
        ended_at = max(min(seen, job.end_time + 1.0), job.end_time)
    out_dir = Path(record.output_dir) if record and record.output_dir else None
    return BackendStatus(
        state=state,
        exit_code=exit_code,
        started_at=job.start_time if state != "PENDING" else None,
        ended_at=ended_at,
        signal=sig,
        cancelled_by_us=record is not None and record.intent == "cancel",
        node=job.node or (record.node if record else None),
        output_tail=_tail(job, out_dir, tail_bytes) if terminal else "",
        isolation=record.isolation if record else parse_comment(job.comment)[0],
        reason=job.reason if job.reason not in ("", "None") else None,
    )


def _tail(job: SlurmJob, out_dir: Path | None, limit: int) -> str:
    """The end of stdout + stderr (X7 reads the OOM markers there)."""
    paths = [out_dir / "stdout", out_dir / "stderr"] if out_dir else []
    if not paths:
        paths = [Path(p) for p in (job.stdout, job.stderr) if p]
    return "\n".join(read_tail(p, limit) for p in paths)
