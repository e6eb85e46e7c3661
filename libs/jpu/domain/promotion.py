"""Promotion from the personal queue to the global queue (SPEC Q5, S1, Q7, Q8, Q9). Pure.

Whenever a user's slot frees or they submit, their oldest personal-queue jobs are promoted while
they hold fewer than `max_active_jobs` slot-holding jobs (the count is the fold's, S1; the
choice is jpu.policy.queue.promotions). A held job (Q9), one whose dependencies are not met
(Q8) or a task beyond its array's `%N` (Q7) is skipped, and the next eligible job is promoted
instead: it holds no slot while it waits. jpu_services.intake.promote appends the events.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from typing import Final, Literal

import msgspec

from jpu.config import Cluster, Config
from jpu.domain.arrays import held_back, throttle_allows
from jpu.domain.cluster import ClusterState
from jpu.domain.states import JobView
from jpu.events import JobPromoted
from jpu.policy.queue import promotions

PersonalReason = Literal["Held", "Dependency", "ArrayThrottle", "ConcurrencyLimit"]
# Q5: the services' default max_active_jobs, for a `cluster` that is not a whole Config
DEFAULT_MAX_ACTIVE_JOBS: Final = next(
    f.default for f in msgspec.structs.fields(Config) if f.name == "max_active_jobs"
)


def personal_standing(
    state: ClusterState, cluster: Cluster, job: JobView
) -> tuple[PersonalReason, list[str]]:
    """D7 for a personal-queue job as every view reads it (jpu why, the queue at a past moment):
    its `personal_reason` counting what intake promotes at once (Q7), and those jobs."""
    promoting = promoting_now(state, cluster, job)
    return personal_reason(state, job, promoting), promoting


def personal_reasons(
    state: ClusterState, cluster: Cluster, job_ids: Iterable[str]
) -> dict[str, PersonalReason]:
    """`personal_standing`'s reason for many jobs at once (the gateway's queue and job views):
    what intake promotes at once is worked out once per user, not once per task (Q5, Q7).
    A job the state does not hold (ended, O6) gets none."""
    promoting: dict[str, list[str]] = {}
    out: dict[str, PersonalReason] = {}
    for jid in job_ids:
        job = state.jobs.get(jid)
        if job is None:
            continue
        now: list[str] = []
        if job.array_id is not None and job.array_throttle is not None:
            if job.user not in promoting:
                promoting[job.user] = promoting_now(state, cluster, job)
            now = promoting[job.user]
        out[jid] = personal_reason(state, job, now)
    return out


def promoting_now(state: ClusterState, cluster: Cluster, job: JobView) -> list[str]:
    """The jobs of `job`'s user that intake promotes at once (Q5, `to_promote`), e.g. an array's
    first tasks right after its submit, before their JobPromoted follow; only for a task under
    a `%N` (Q7), the one reason they change."""
    if job.array_id is None or job.array_throttle is None:
        return []
    default = int(getattr(cluster, "max_active_jobs", DEFAULT_MAX_ACTIVE_JOBS))
    return to_promote(state, {job.user}, configured_limits(cluster), default)


def personal_reason(
    state: ClusterState, job: JobView, promoting: Sequence[str] = ()
) -> PersonalReason:
    """D7 for a personal-queue job: `Held` (Q9) before `Dependency` (Q8: a condition not met,
    or a singleton whose name already holds a slot), then `ArrayThrottle` (Q7: its array's
    tasks hold `%N` slots), else `ConcurrencyLimit` (Q5). `promoting`: the jobs intake promotes
    at once (`to_promote`), e.g. an array's first tasks right after its submit, before their
    JobPromoted: the slots they take count toward `%N`, so a task beyond it already reads
    `ArrayThrottle` at its submit."""
    if job.held:
        return "Held"
    if job.waiting or job.never is not None:
        return "Dependency"
    if job.singleton and state.named.get((job.user, job.name), 0) > 0:
        return "Dependency"
    if held_back(job.array_id, job.array_throttle, array_slots(state, job, promoting)):
        return "ArrayThrottle"
    return "ConcurrencyLimit"


def array_slots(state: ClusterState, job: JobView, promoting: Sequence[str] = ()) -> dict[str, int]:
    """Q7: the slots `job`'s array holds (S1) and those its other tasks in `promoting` are about
    to take (`job` itself is never counted: a task promotion lets through fits its `%N`)."""
    if job.array_id is None:
        return {}
    about = sum(
        1
        for jid in promoting
        if jid != job.job_id
        and (other := state.jobs.get(jid)) is not None
        and other.array_id == job.array_id
    )
    return {job.array_id: state.array_slots.get(job.array_id, 0) + about}


def _eligible(state: ClusterState, queue: Iterable[str]) -> list[str]:
    """The jobs of one personal queue that may take a slot, oldest first, as far as holds and
    dependencies go; of singleton jobs of one name, only the first (Q8: one of them holds a
    slot at a time)."""
    out: list[str] = []
    names: set[str] = set()
    for jid in queue:
        job = state.jobs.get(jid)
        if job is None or job.held or job.waiting or job.never is not None:
            continue
        if job.singleton:
            if state.named.get((job.user, job.name), 0) > 0 or job.name in names:
                continue
            names.add(job.name)
        out.append(jid)
    return out


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
        u: eligible
        for u, q in state.personal.items()
        if q
        and (users is None or u in users)
        and (eligible := promotable(state, _eligible(state, q), limits.get(u, default)))
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


def never_satisfied(state: ClusterState, users: set[str] | None) -> list[str]:
    """Q8: personal-queue jobs whose dependency can never be met, to end CANCELLED."""
    return [
        jid
        for u, q in state.personal.items()
        if users is None or u in users
        for jid in q
        if (job := state.jobs.get(jid)) is not None and job.never is not None
    ]


def promoted(job_id: str, now: float, event_id: str) -> JobPromoted:
    """Q5: the job enters the global queue now (`queue_entered_at` = the promotion time)."""
    return JobPromoted(event_id=event_id, ts=now, job_id=job_id, queue_entered_at=now)
