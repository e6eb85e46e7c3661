"""A backend's final status → the attempt's JobEnded (SPEC X6, X7, F2, F4). Pure: the agent
passes the time and the event id in.

`usage` is what this end charges: the GPUs held from the dispatch to the end (num_gpus × (startup
+ run) seconds × the tier's TFLOPS, F5) plus the attempt's reservation time not already charged
(R4 swap / dispatched releases, at the tflops of each reservation's own tier). R3-like releases
were charged when they happened and are excluded.
"""

from __future__ import annotations

from jpu.config import Tier
from jpu.domain.execution import AgentJob
from jpu.domain.observed import BackendStatus
from jpu.events import JobEnded, JobEndState
from jpu.policy.oom import is_gpu_oom

_REASONS = {
    "TIMEOUT": "TIMEOUT",
    "NODE_FAIL": "NODE_FAIL",
    "PREEMPTED": "PREEMPTED",
    "OUT_OF_MEMORY": "HOST_OOM",
}


def end_state(status: BackendStatus) -> JobEndState:
    if status.state in ("COMPLETED", "CANCELLED"):
        return status.state
    return "FAILED"


def end_reason(status: BackendStatus, oom: bool) -> str | None:
    if oom:
        return "OOM"
    if status.state == "FAILED":
        return "NonZeroExitCode"
    if status.state == "CANCELLED":
        return "kill_failed" if status.kill_failed else "cancelled"
    reason = _REASONS.get(status.state, status.reason)
    if status.state == "NODE_FAIL" and status.reason:
        return f"NODE_FAIL: {status.reason}"  # e.g. why a launch failed, for `jpu show`
    return reason


def run_seconds(status: BackendStatus) -> float:
    if status.started_at is None or status.ended_at is None:
        return 0.0
    return max(status.ended_at - status.started_at, 0.0)


def startup_seconds(status: BackendStatus, dispatched_at: float, now: float) -> float:
    """SPEC F5: the GPUs were held from the dispatch, not from the backend's start — a
    backfill preemption grace, a Slurm job kept pending, a slow launch. Until the start, or
    until the end when the attempt never started (cancelled first, launch failed)."""
    until = status.started_at if status.started_at is not None else (status.ended_at or now)
    return max(until - dispatched_at, 0.0)


def job_ended(
    job: AgentJob,
    status: BackendStatus,
    tier: Tier,
    bid: str | None,
    now: float,
    event_id: str = "",
) -> JobEnded:
    """`event_id`: the agent's (empty: the caller's log assigns one, as the simulator's does)."""
    d = job.dispatched
    assert d is not None
    gpus = len(d.gpus) or job.submitted.num_gpus
    gpu_s_run = gpus * run_seconds(status)
    gpu_s_startup = gpus * startup_seconds(status, d.ts, now)
    oom = is_gpu_oom(status.state == "FAILED", status.output_tail)  # X7
    return JobEnded(
        event_id=event_id,
        ts=now,
        job_id=job.submitted.job_id,
        attempt=d.attempt,
        state=end_state(status),
        exit_code=status.exit_code,
        node=d.node,
        tier=d.tier,
        gpus=list(d.gpus),
        gpu_seconds_run=gpu_s_run,
        gpu_seconds_reserved=job.view.uncharged_reserved_gpu_s,
        gpu_seconds_startup=gpu_s_startup,
        tflops=tier.tflops,
        usage=(gpu_s_startup + gpu_s_run) * tier.tflops + job.view.uncharged_reserved_usage,  # F4
        oom=oom,
        host_oom=status.state == "OUT_OF_MEMORY",  # X7: reported, never escalated
        reason=end_reason(status, oom),
        kill_failed=status.kill_failed,
        backend_job_id=bid,
    )


def cancelled_unstarted(job: AgentJob, tier: Tier, now: float, event_id: str = "") -> JobEnded:
    """A cancel reached a dispatched attempt before the backend ran it: nothing ran; the
    reservation part of the attempt is still charged now (F4, R5)."""
    status = BackendStatus(state="CANCELLED")
    return job_ended(job, status, tier, None, now, event_id)
