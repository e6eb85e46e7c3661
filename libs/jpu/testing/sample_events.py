"""Small job events for tests of the bus itself (SPEC E2): a submit and its promotion, nothing
else to say. Shared here: a test module is not a library to import from."""

from __future__ import annotations

from jpu.events import JobPromoted, JobSubmitted, new_event_id


def submitted(job_id: str, ts: float = 1.0) -> JobSubmitted:
    return JobSubmitted(
        event_id=new_event_id(),
        ts=ts,
        job_id=job_id,
        lab="BCG",
        user="alice",
        name="train",
        command="python train.py",
        num_gpus=1,
    )


def promoted(job_id: str, ts: float = 2.0) -> JobPromoted:
    return JobPromoted(event_id=new_event_id(), ts=ts, job_id=job_id, queue_entered_at=ts)
