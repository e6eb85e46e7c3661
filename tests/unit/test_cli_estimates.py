"""SPEC U4 in the CLI: `jpu show` and `jpu queue --start` print the API's estimate as an
estimate, with its basis, and "unknown" when the estimate found no start."""

from __future__ import annotations

from jpu.cli.rest import jobviews as rest_jobviews
from jpu.cli.rest.render import fmt_ts

T = 1_800_000_000.0


def _job(**over: object) -> dict[str, object]:
    base = {
        "id": "j1",
        "name": "n",
        "user": "u",
        "lab": "L",
        "state": "GLOBAL_QUEUE_WAIT",
        "attempt": 1,
        "num_gpus": 2,
        "rank": 1,
        "pending_reason": "Resources",
    }
    return {**base, **over}


def test_U4_show_prints_the_estimate_with_its_basis_and_time():
    out = rest_jobviews.job(_job(estimated_start=T + 3600, estimate_basis="limits", estimated_at=T))
    line = next(x for x in out.splitlines() if "EstimatedStart" in x)
    assert fmt_ts(T + 3600) in line and "estimate from limits" in line and fmt_ts(T) in line


def test_U4_show_says_unknown_and_nothing_without_an_estimate():
    out = rest_jobviews.job(_job(estimated_start=None, estimate_basis="unknown", estimated_at=T))
    assert "unknown (estimate" in out
    assert "EstimatedStart" not in rest_jobviews.job(
        _job(estimated_start=None, estimate_basis=None)
    )


def test_U4_queue_start_column():
    entry = {
        "rank": 1,
        "job_id": "j1",
        "num_gpus": 1,
        "state": "GLOBAL_QUEUE_WAIT",
        "pending_reason": "Resources",
    }
    data = {
        "queue": [
            {**entry, "estimated_start": T, "estimate_basis": "predicted", "estimated_at": T - 5},
            {**entry, "job_id": "j2", "estimated_start": None, "estimate_basis": "unknown"},
        ]
    }
    out = rest_jobviews.queue(data, start=True)
    assert "ESTIMATED_START" in out
    assert fmt_ts(T) in out and "unknown" in out


def test_U4_show_and_queue_say_why_a_start_is_unknown():
    why = "the GPUs it can use are held by r1, with no time limit and no prediction of their end"
    out = rest_jobviews.job(
        _job(estimated_start=None, estimate_basis="unknown", estimated_at=T, estimate_reason=why)
    )
    line = next(x for x in out.splitlines() if "EstimatedStart" in x)
    assert f"unknown: {why}" in line and fmt_ts(T) in line
    entry = {"rank": 1, "num_gpus": 1, "state": "GLOBAL_QUEUE_WAIT", "estimated_start": None}
    data = {
        "queue": [
            {**entry, "job_id": "j1", "estimate_basis": "unknown", "estimate_reason": why},
            {**entry, "job_id": "j2", "estimate_basis": "unknown", "estimate_reason": why},
        ]
    }
    assert f"unknown start of j1, j2: {why}" in rest_jobviews.queue(data, start=True)
    pending = _job(estimated_start=None, estimate_basis=None, estimate_reason="not estimated yet")
    assert "not estimated yet" in rest_jobviews.job(pending)
