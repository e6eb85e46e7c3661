"""SPEC F5: every GPU-second held is charged once — held from the dispatch,
including the time the backend took to start the job, not only from the backend's start."""

from __future__ import annotations

import pytest

from jpu.backends import BackendStatus
from jpu.config import load_config
from jpu.domain.ending import cancelled_unstarted, job_ended
from jpu.domain.execution import AgentJob
from jpu.domain.states import JobView
from jpu.events import JobDispatched, JobSubmitted

TIER = load_config(env={}).tier("rtx4090")


def _dispatched_at(t: float) -> AgentJob:
    sub = JobSubmitted(event_id="s", ts=0.0, job_id="j", lab="BCG", user="u", name="n",
                       command="c", num_gpus=2)  # fmt: skip
    job = AgentJob(JobView.submitted(sub, 1), sub)
    job.dispatched = JobDispatched(event_id="d", ts=t, job_id="j", attempt=1, node="n1",
                                   tier="rtx4090", gpus=[0, 1])  # fmt: skip
    return job


def test_F5_the_time_from_dispatch_to_the_backends_start_is_charged() -> None:
    # dispatched at 100; Slurm kept it pending (or a backfill instance was preempted) until 130
    status = BackendStatus(state="COMPLETED", exit_code=0, started_at=130.0, ended_at=730.0)
    end = job_ended(_dispatched_at(100.0), status, TIER, "42", now=731.0, event_id="e1")
    assert end.gpu_seconds_startup == 2 * 30.0 and end.gpu_seconds_run == 2 * 600.0
    assert end.usage == pytest.approx(2 * (30.0 + 600.0) * TIER.tflops)  # held 100 → 730


def test_F5_an_attempt_cancelled_before_it_started_is_charged_from_its_dispatch() -> None:
    end = cancelled_unstarted(_dispatched_at(100.0), TIER, now=145.0, event_id="e2")
    assert end.state == "CANCELLED" and end.gpu_seconds_run == 0.0
    assert end.gpu_seconds_startup == 2 * 45.0
    assert end.usage == pytest.approx(2 * 45.0 * TIER.tflops)
