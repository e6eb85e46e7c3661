"""The fold keeps the global queue grouped by lab (ClusterState.queue) event by event: it always
holds exactly the GLOBAL_QUEUE_WAIT/RESERVING jobs, with their current records (SPEC D1, S3)."""

from __future__ import annotations

from itertools import count

from jpu.bus import Delivered
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dispatch import queue
from jpu.domain.states import QUEUED, queued_job
from jpu.events import (
    Event,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobRetryScheduled,
    JobSubmitted,
    ReservationReleased,
    ReservationStarted,
    new_event_id,
)


def _apply(st: ClusterState, seq: count, cls: type[Event], /, **kw: object) -> None:
    event = cls(event_id=new_event_id(), ts=float(st.seq), **kw)
    evolve(st, Delivered(seq=next(seq), subject="s", event=event, headers={}))


def _expected(state: ClusterState) -> dict[str, object]:
    return {j.job_id: queued_job(j) for j in state.jobs.values() if j.state in QUEUED}


def test_D1_fold_keeps_the_grouped_queue_in_step_with_job_states():
    state, seq = ClusterState(), count(1)
    for i, lab in enumerate("ABAB"):
        _apply(
            state,
            seq,
            JobSubmitted,
            job_id=f"j{i}",
            lab=lab,
            user="u",
            name="n",
            command="c",
            num_gpus=2,
        )
    assert len(queue(state)) == 0  # personal queue only (Q4)
    for i in (3, 0, 1, 2):
        _apply(state, seq, JobPromoted, job_id=f"j{i}", queue_entered_at=10.0 - i)
    steps: list[tuple[type[Event], dict[str, object]]] = [
        (ReservationStarted, {"job_id": "j0", "node": "n", "tier": "t", "gpus": [0]}),
        (JobDispatched, {"job_id": "j1", "attempt": 1, "node": "n", "tier": "t", "gpus": [1]}),
        (JobCancelRequested, {"job_id": "j2", "by": "u"}),
        (
            ReservationReleased,
            {
                "job_id": "j0",
                "node": "n",
                "tier": "t",
                "gpus": [0],
                "reason": "demoted",
                "gpu_seconds": 5.0,
                "charged_now": True,
            },
        ),
        (JobDispatched, {"job_id": "j3", "attempt": 1, "node": "n", "tier": "t", "gpus": [2]}),
        (JobEnded, {"job_id": "j3", "attempt": 1, "state": "FAILED", "oom": True}),
        (JobRetryScheduled, {"job_id": "j3", "attempt": 2, "min_vram_gb": 48}),
    ]
    for cls, kw in steps:
        _apply(state, seq, cls, **kw)
        assert {j.job_id: j for j in queue(state)} == _expected(state), cls.__name__
    assert [j.job_id for j in queue(state)] == ["j0", "j3"]
    assert queue(state)["j3"].min_vram_gb == 48 and queue(state)["j3"].attempt == 2  # X8
    assert not queue(state).holders  # j0's reservation was released (R3)
