"""What the platform keeps of a job after it ends, and for how long. Pure.

The event log is the audit trail (SPEC E6): the platform never prunes it. A job's output
directory (SPEC X2, `<output_root>/<job_id>/`) is the user's data on the site's disk: a site may
bound it with `outputs_keep_days`, counted from the job's last event, and only once the job has
ended for good — a job waiting for its OOM retry (R5) or still running is never touched, and a
directory the log does not know (a foreign folder, a log restored from an older backup) is kept.
"""

from __future__ import annotations

from dataclasses import dataclass

DAY_S = 86_400.0


@dataclass(frozen=True)
class EndedJob:
    """What the log says of one job: whether it has ended for good (S2) and when it last moved."""

    terminal: bool
    last_event_ts: float


def output_expired(job: EndedJob | None, now: float, keep_days: float) -> bool:
    """Whether the job's output directory may be removed at `now` (0 days: never)."""
    if keep_days <= 0 or job is None or not job.terminal:
        return False
    return now - job.last_event_ts >= keep_days * DAY_S
