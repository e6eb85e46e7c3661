"""What the agent knows of one job: a fold of the job's events, and what to do about it. Pure.

The job's state machine is the shared one (jpu.domain.states, SPEC S1–S3); on top of it the agent
keeps what it needs to execute: the request (command, env, user), the current attempt's dispatch
and start. What the attempt's reservations still owe (F4, R4) is the shared fold's ledger
(`JobView.uncharged_reserved_*`), charged with the attempt's end (ending.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from jpu.config import Tier
from jpu.domain.states import JobView, apply_job_event
from jpu.events import (
    Delivered,
    JobDispatched,
    JobStarted,
    JobSubmitted,
)

Action = Literal["submit", "watch", "cancel", "cancel_unstarted"]


@dataclass
class AgentJob:
    view: JobView
    submitted: JobSubmitted
    dispatched: JobDispatched | None = None  # of the current attempt
    started: JobStarted | None = None  # of the current attempt

    @property
    def last_seq(self) -> int:
        return self.view.last_seq

    @property
    def attempt(self) -> int:
        return self.view.attempt

    def apply(self, delivered: Delivered, tiers: Mapping[str, Tier]) -> None:
        if delivered.seq <= self.view.last_seq:
            return  # redelivery of something already folded
        apply_job_event(self.view, delivered)
        e = delivered.event
        if isinstance(e, JobDispatched) and self.view.placement is not None:
            if self.dispatched is None or e.attempt > self.dispatched.attempt:
                self.dispatched, self.started = e, None
        elif isinstance(e, JobStarted) and self.dispatched and e.attempt == self.dispatched.attempt:
            self.started = e


def fold_job(events: Iterable[Delivered], tiers: Mapping[str, Tier]) -> AgentJob | None:
    """The job from its own events in order; None when it has no JobSubmitted (yet)."""
    job: AgentJob | None = None
    for d in events:
        if job is None:
            if isinstance(d.event, JobSubmitted):
                job = AgentJob(JobView.submitted(d.event, d.seq), d.event)
            continue
        job.apply(d, tiers)
    return job


def next_action(job: AgentJob) -> Action | None:
    """What the agent owes this job now (SPEC §5); None when it owes nothing."""
    v = job.view
    if v.placement is None or job.dispatched is None:
        return None  # never dispatched, or its attempt ended: not the agent's business
    if v.state == "DISPATCHED":
        return "submit" if job.started is None else "watch"
    if v.state == "RUNNING":
        return "watch"
    if v.state == "CANCELLING":
        return "cancel" if job.started is not None else "cancel_unstarted"
    return None
