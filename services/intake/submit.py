"""Submit and cancel commands (SPEC Q1–Q3, Q6, §8) decided on the intake's fold of the log.

A submission becomes `JobSubmitted` appended with expected last subject sequence 0: with an
Idempotency-Key the job id is `hash(user, key)`, so two replicas racing on the same key produce
one job (the loser reads the winner's event and answers as a replay, or IDEMPOTENCY_CONFLICT
when the bodies differ).
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Mapping
from typing import Any

import msgspec

from jpu import limits
from jpu.bus import ConcurrencyConflict, EventBus
from jpu.bus.fold_follow import Follower
from jpu.commands import CancelCommand, CommandReply, SubmitCommand, error_reply
from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.domain.holdings import gpus
from jpu.domain.states import JobView, apply_job_event, request_digest
from jpu.events import JobCancelRequested, JobSubmitted, new_event_id
from jpu.policy import maintenance
from jpu.policy.placements import ever_fits
from jpu.policy.queue import largest_placement, validate_submit


class _Want(msgspec.Struct, frozen=True):
    num_gpus: int
    tiers: frozenset[str] | None
    min_vram_gb: int | None


def job_id_for(user: str, key: str | None) -> str:
    """Deterministic for an idempotent submit (Q6), random otherwise."""
    if key is None:
        return uuid.uuid4().hex[:24]
    return hashlib.sha256(f"{user}\x00{key}".encode()).hexdigest()[:24]


def to_event(cmd: SubmitCommand, jid: str, now: float) -> JobSubmitted:
    b: Mapping[str, Any] = cmd.body
    limit = b.get("time_limit_s")
    return JobSubmitted(
        event_id=new_event_id(),
        ts=now,
        job_id=jid,
        lab=cmd.lab,
        user=cmd.user,
        name=b.get("name") or "job",
        command=b["command"],
        num_gpus=b["num_gpus"],
        tiers=list(b["tiers"]) if b.get("tiers") is not None else None,
        min_vram_gb=b.get("min_vram_gb"),
        time_limit_s=math.ceil(limit) if limit is not None else None,
        env=dict(b.get("env") or {}),
        idempotency_key=cmd.idempotency_key,
        chdir=b.get("chdir"),  # U5: validated (jpu.policy.workdir); None: JOB_OUTPUT_DIR
    )


def _replay(existing_digest: str, event: JobSubmitted, seq: int, state: str) -> CommandReply:
    if existing_digest != request_digest(event):
        return error_reply(
            "IDEMPOTENCY_CONFLICT",
            "this Idempotency-Key was used with a different request body",
            {"job_id": event.job_id},
        )
    return CommandReply(status=200, job_id=event.job_id, seq=seq, replayed=True, state=state)


async def submit(
    cmd: SubmitCommand, state: ClusterState, bus: EventBus, config: Config, now: float
) -> CommandReply:
    """Q1 validation → Q6 replay → Q3 maintenance → Q2 no-fit → JobSubmitted (Q4)."""
    tiers = {t.name: t for t in config.tiers}
    problems = validate_submit(cmd.body, list(tiers))
    key_problem = limits.idempotency_key_problem(cmd.idempotency_key)
    if key_problem:
        problems.append(limits.FieldError("Idempotency-Key", key_problem))
    if problems:  # nothing reaches the log that a projection could not store (jpu.limits)
        return error_reply("VALIDATION_ERROR", *limits.error_details(problems))
    event = to_event(cmd, job_id_for(cmd.user, cmd.idempotency_key), now)
    known = state.jobs.get(event.job_id)
    if cmd.idempotency_key is not None and known is None:
        known = await _ended_job(bus, event.job_id)  # an ended job left the hot state
    if cmd.idempotency_key is not None and known is not None:
        return _replay(known.digest, event, known.submit_seq, known.state)
    if not maintenance.submit_allowed(state.maintenance.state):  # type: ignore[arg-type]
        return error_reply(
            "SERVICE_MAINTENANCE",
            "the cluster is in maintenance; submit later",
            {"state": state.maintenance.state, "message": state.maintenance.message},
        )
    want = _Want(event.num_gpus, frozenset(event.tiers) if event.tiers else None, event.min_vram_gb)
    if not ever_fits(want, gpus(state), tiers):
        return error_reply(
            "NO_FIT_PLACEMENT",
            "no placement of the cluster can ever run this job",
            {
                "num_gpus": event.num_gpus,
                "tiers": event.tiers,
                "min_vram_gb": event.min_vram_gb,
                "largest_placement": largest_placement(want, gpus(state), tiers),  # the fix
            },
        )
    try:
        seq = await bus.append(event, expected_last_subject_seq=0)
    except ConcurrencyConflict:  # another replica created this idempotent job first
        first_event = (await bus.job_events(event.job_id))[0]
        winner = first_event.event
        assert isinstance(winner, JobSubmitted)
        return _replay(request_digest(winner), event, first_event.seq, "PERSONAL_QUEUE_WAIT")
    return CommandReply(status=201, job_id=event.job_id, seq=seq, state="PERSONAL_QUEUE_WAIT")


async def _ended_job(bus: EventBus, job_id: str) -> JobView | None:
    """A job the services' fold no longer holds (it ended for good), folded from its own
    subject of the log; None when the log has no such job."""
    events = await bus.job_events(job_id)
    if not events or not isinstance(events[0].event, JobSubmitted):
        return None
    job = JobView.submitted(events[0].event, events[0].seq)
    for d in events[1:]:
        apply_job_event(job, d)
    return job


def _may_cancel(cmd: CancelCommand, user: str, lab: str) -> bool:
    return cmd.by == user or cmd.role == "admin" or (cmd.role == "lab_admin" and cmd.lab == lab)


async def cancel(
    cmd: CancelCommand, state: ClusterState, follower: Follower, bus: EventBus, now: float
) -> CommandReply:
    """JobCancelRequested (idempotent; ALREADY_TERMINAL once the job ended, §8)."""
    for _ in range(5):
        job = state.jobs.get(cmd.job_id)
        if job is None:
            await follower.catch_up()  # it may have been submitted a moment ago
            job = state.jobs.get(cmd.job_id)
        if job is None:
            job = await _ended_job(bus, cmd.job_id)  # gone from the hot state: ended (issue 11)
        if job is None:
            return error_reply("NOT_FOUND", f"no job {cmd.job_id}")
        if not _may_cancel(cmd, job.user, job.lab):
            return error_reply("FORBIDDEN", "only the owner, a lab_admin of its lab or an admin")
        if job.terminal and not job.oom_pending:
            return error_reply("ALREADY_TERMINAL", f"job already {job.state}", {"state": job.state})
        if job.state == "CANCELLING":
            return CommandReply(
                status=202, job_id=job.job_id, seq=job.last_seq, replayed=True, state=job.state
            )
        event = JobCancelRequested(event_id=new_event_id(), ts=now, job_id=job.job_id, by=cmd.by)
        try:
            seq = await bus.append(event, expected_last_subject_seq=job.last_seq)
        except ConcurrencyConflict:
            await follower.catch_up()  # the job moved: look again
            continue
        return CommandReply(status=202, job_id=job.job_id, seq=seq, state="CANCELLING")
    return error_reply("INTERNAL", "the job kept changing; try again")
