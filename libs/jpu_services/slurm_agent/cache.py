"""The agent's own fold of the job events it consumes, so a dispatch needs no replay of the job.

The durable consumer hands job events over in stream order, so a job folded from its
JobSubmitted on (or from the restart's full fold) is the log's truth up to the last event
consumed. The fold may lag the log, never contradict it; so it is trusted only to *act* (an
append with its expected last subject sequence conflicts when the fold is stale, and the agent
then re-reads, SPEC E2). A decision that nothing is owed is always taken on a fresh read.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping

from jpu.bus import Delivered
from jpu.config import Tier
from jpu.domain.arrays import tasks_of
from jpu.domain.execution import AgentJob, next_action
from jpu.domain.states import JobView
from jpu.events import JobSubmitted


class JobCache:
    def __init__(self, tiers: Mapping[str, Tier]) -> None:
        self.tiers = tiers
        self.jobs: dict[str, AgentJob] = {}

    def seed(self, jobs: Iterable[AgentJob]) -> None:
        """The restart's fold (recovery): every job that may still move."""
        for job in jobs:
            if not _settled(job):
                self.jobs.setdefault(job.view.job_id, _copy(job))

    def observe(self, d: Delivered) -> None:
        """One consumed job event, in stream order; a job ended for good is forgotten (a later
        retry or cancel of it is read from the log)."""
        e = d.event
        if isinstance(e, JobSubmitted):
            for task in tasks_of(e):  # an array's one event: each task a job (Q7)
                self.jobs.setdefault(task.job_id, AgentJob(JobView.submitted(task, d.seq), task))
            return
        job_id = getattr(e, "job_id", None)
        job = self.jobs.get(job_id) if job_id is not None else None
        if job is None:
            return
        job.apply(d, self.tiers)
        if _settled(job):
            del self.jobs[job.view.job_id]

    def owed(self, job_id: str) -> AgentJob | None:
        """A private copy of the folded job when it says the agent owes it something."""
        job = self.jobs.get(job_id)
        if job is None or next_action(job) is None:
            return None
        return _copy(job)

    def appended(self, job_id: str, expected_seq: int, d: Delivered) -> None:
        """The agent's own append succeeded after `expected_seq`: fold it now when the cached
        job is exactly there (no gap), rather than waiting for the consumer to bring it."""
        job = self.jobs.get(job_id)
        if job is not None and job.last_seq == expected_seq:
            job.apply(d, self.tiers)
            if _settled(job):
                del self.jobs[job_id]


def _settled(job: AgentJob) -> bool:
    return job.view.terminal and not job.view.oom_pending  # X8: an OOM end may be retried


def _copy(job: AgentJob) -> AgentJob:
    # JobView's fields are only ever reassigned by the fold, never mutated: a shallow copy is
    # independent of the cached job.
    return dataclasses.replace(job, view=copy.copy(job.view))
