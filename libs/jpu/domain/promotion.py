"""Promotion from the personal queue to the global queue (SPEC Q5, S1). Pure.

Whenever a user's slot frees or they submit, their oldest personal-queue jobs are promoted while
they hold fewer than `max_active_jobs` slot-holding jobs (the count is the fold's, S1; the
choice is jpu.policy.queue.promotions). services/intake/promote.py appends the events.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice

from jpu.config import Cluster
from jpu.domain.arrays import throttle_allows
from jpu.domain.cluster import ClusterState
from jpu.events import JobPromoted
from jpu.policy.queue import promotions


def configured_limits(cluster: Cluster) -> dict[str, int]:
    """user → max_active_jobs, for the users the configuration gives one (`labs[].users[]`);
    the others get the global default (Q5)."""
    return {
        u.name: u.max_active_jobs
        for lab in cluster.labs
        for u in lab.users
        if u.max_active_jobs is not None
    }


def to_promote(
    state: ClusterState, users: set[str] | None, limits: Mapping[str, int], default: int
) -> list[str]:
    """The jobs Q5 promotes now, of `users` (None: everyone); `limits`: user → max_active_jobs,
    `default` for the others."""
    personal = {
        u: promotable(state, q, limits.get(u, default))
        for u, q in state.personal.items()
        if q and (users is None or u in users)
    }
    if not personal:
        return []
    return promotions(personal, state.slots, limits, default)


def promotable(state: ClusterState, queue: list[str], at_most: int) -> list[str]:
    """The first `at_most` jobs of a personal queue that may be promoted: a task beyond its
    array's `%N` is skipped (ArrayThrottle, Q7), so the next eligible job goes instead."""

    def array_of(job_id: str) -> tuple[str, int | None] | None:
        job = state.jobs.get(job_id)
        if job is None or job.array_id is None:
            return None
        return job.array_id, job.array_throttle

    return list(islice(throttle_allows(queue, array_of, state.array_slots), max(at_most, 0)))


def promoted(job_id: str, now: float, event_id: str) -> JobPromoted:
    """Q5: the job enters the global queue now (`queue_entered_at` = the promotion time)."""
    return JobPromoted(event_id=event_id, ts=now, job_id=job_id, queue_entered_at=now)
