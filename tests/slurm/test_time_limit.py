"""Slurm's own time limit (whole minutes) ends a job TIMEOUT (SPEC X1, X6). Its job was submitted
when this directory's first test started (conftest.native_timeout_job); this module runs last."""

from __future__ import annotations

import time

from jpu.testing.slurm_env import NativeTimeout, wait_end


async def test_slurm_time_limit_ends_the_job_TIMEOUT(native_timeout_job: NativeTimeout) -> None:
    t = native_timeout_job
    remaining = t.submitted_at + 150 - time.time()
    status = await wait_end(t.backend, t.backend_job_id, timeout=max(remaining, 5))
    assert status.state == "TIMEOUT" and not status.cancelled_by_us
    assert status.exit_code is None and status.signal is not None  # ended by Slurm's signal
    assert status.started_at is not None and status.ended_at is not None
    assert 60 <= status.ended_at - status.started_at < 120
    assert "started" in status.output_tail
