"""Submit and cancel commands (SPEC Q1–Q3, Q6, §8): intake's edge. What to answer and append is
decided in jpu.domain.submission on the intake's fold of the log; this module reads and appends.

A submission becomes `JobSubmitted` appended with expected last subject sequence 0: with an
Idempotency-Key the job id is `hash(user, key)`, so two replicas racing on the same key produce
one job (the loser reads the winner's event and answers as a replay, or IDEMPOTENCY_CONFLICT
when the bodies differ).
"""

from __future__ import annotations

import asyncio
import uuid

import msgspec

from jpu.backends.workdir_check import JobAccounts, chdir_facts
from jpu.bus import ConcurrencyConflict, EventBus
from jpu.bus.fold_follow import Follower
from jpu.commands import CancelCommand, CommandReply, HoldCommand, SubmitCommand, error_reply
from jpu.config import Config
from jpu.domain.arrays import tasks_of
from jpu.domain.cluster import ClusterState, parent_facts
from jpu.domain.states import JobView, job_view, request_digest
from jpu.domain.submission import (
    Submit,
    array_refused,
    cancel_answer,
    cancel_requested,
    chdir_answer,
    chdir_to_check,
    checked,
    hold_answer,
    hold_event,
    idempotent_job_id,
    refused,
    replay,
    submitted,
    with_sbatch,
    with_workspace,
)
from jpu.events import JobSubmitted, new_event_id
from jpu.policy.sbatch import site_of


def job_id_for(user: str, key: str | None) -> str:
    """Deterministic for an idempotent submit (Q6), random otherwise."""
    return uuid.uuid4().hex[:24] if key is None else idempotent_job_id(user, key)


async def submit(
    cmd: SubmitCommand,
    state: ClusterState,
    bus: EventBus,
    config: Config,
    now: float,
    accounts: JobAccounts,
    follower: Follower | None = None,
) -> CommandReply:
    """U5/SEC1 chdir → X4a workspace → U6 sbatch options → Q1 validation → Q6 replay → Q3
    maintenance → Q8 parents' lab → Q2 no-fit → JobSubmitted (Q4). The warnings (U6's, then
    U5's) are answered with the accepted job."""
    warnings: list[dict[str, object]] = []
    if (chdir := chdir_to_check(cmd)) is not None:  # as the job's account would see it (X4)
        facts = await asyncio.to_thread(chdir_facts, config, accounts, cmd.user, chdir)
        refusal, warnings = chdir_answer(chdir, *facts, config.workdir_roots)
        if refusal is not None:
            return refusal
    cmd, image, refusal = with_workspace(cmd, state)
    if refusal is not None:
        return refusal
    cmd, sbatch = with_sbatch(cmd, site_of(config, cmd.lab))  # U6: decided here, for any client
    if sbatch.refusal is not None:
        return sbatch.refusal
    reply = await _decided(cmd, image, state, bus, config, now, follower, sbatch.warnings)
    warnings = [*sbatch.said(), *warnings]
    return msgspec.structs.replace(reply, warnings=warnings) if warnings and reply.ok else reply


async def _decided(
    cmd: SubmitCommand,
    image: str | None,
    state: ClusterState,
    bus: EventBus,
    config: Config,
    now: float,
    follower: Follower | None,
    sbatch_warnings: list[str],
) -> CommandReply:
    tiers = {t.name: t for t in config.tiers}
    sub: Submit | CommandReply = checked(cmd, tiers)  # Q1; the dependency read once (Q8)
    if isinstance(sub, CommandReply):
        return sub
    answer = array_refused(cmd, state, config.array_max_tasks, config.array_max_queued_per_user)
    if answer is not None:
        return answer
    jid = job_id_for(cmd.user, cmd.idempotency_key)
    event = submitted(sub, jid, now, new_event_id(), image, sbatch_warnings)
    known = state.jobs.get(event.job_id)
    if cmd.idempotency_key is not None and known is not None:
        return replay(known.digest, event, known.submit_seq, known.state)
    parents = [p for _, p in sub.dependency.conditions]
    if follower is not None and any(parent_facts(state, p) is None for p in parents):
        await follower.catch_up(timeout=5.0)  # Q8: a parent submitted a moment ago elsewhere
    answer = refused(state, sub, event, tiers)
    if answer is not None:
        # Q6 before Q3/Q2: the key's job may have ended and left the hot state (SPEC O6); only
        # a refused submit reads the log for it: an accepted one learns it from its append
        if cmd.idempotency_key is not None and (ended := await _ended_job(bus, jid)) is not None:
            return replay(ended.digest, event, ended.submit_seq, ended.state)
        return answer
    try:
        seq = await bus.append(event, expected_last_subject_seq=0)
    except ConcurrencyConflict:  # the key's job exists: another replica's, or one that ended
        return await _replayed(bus, event)
    single = event if event.array is None else None  # an array's tasks are the projection's
    return CommandReply(
        status=201, job_id=event.job_id, seq=seq, state="PERSONAL_QUEUE_WAIT", submitted=single
    )


async def _replayed(bus: EventBus, event: JobSubmitted) -> CommandReply:
    """Q6: the job this key made, as its own subject of the log has it now."""
    events = await bus.job_events(event.job_id)
    known = job_view(events)
    if known is not None:
        return replay(known.digest, event, known.submit_seq, known.state)
    winner = events[0]  # a job view needs a JobSubmitted first: this is it
    assert isinstance(winner.event, JobSubmitted)
    return replay(request_digest(winner.event), event, winner.seq, "PERSONAL_QUEUE_WAIT")


async def _ended_job(bus: EventBus, job_id: str) -> JobView | None:
    """A job the services' fold no longer holds (it ended for good), folded from its own
    subject of the log; None when the log has no such job."""
    return job_view(await bus.job_events(job_id))


async def cancel(
    cmd: CancelCommand, state: ClusterState, follower: Follower, bus: EventBus, now: float
) -> CommandReply:
    """JobCancelRequested (idempotent; ALREADY_TERMINAL once the job ended, §8); the id of an
    array cancels every unfinished task of it (Q7)."""
    if cmd.job_id not in state.jobs:
        await follower.catch_up()  # it may have been submitted a moment ago
    if cmd.job_id not in state.jobs:
        events = await bus.job_events(cmd.job_id)
        first = events[0].event if events else None
        if isinstance(first, JobSubmitted) and first.array is not None:  # an array's id
            return await _cancel_array(cmd, tasks_of(first), state, follower, bus, now)
    return await _cancel_one(cmd, state, follower, bus, now)


async def _cancel_array(
    cmd: CancelCommand,
    tasks: list[JobSubmitted],
    state: ClusterState,
    follower: Follower,
    bus: EventBus,
    now: float,
) -> CommandReply:
    """Q7: cancel each task as its own job; accepted (202) when any task was still unfinished."""
    replies: list[CommandReply] = []
    for start in range(0, len(tasks), 64):  # concurrent appends, a bounded number at once
        chunk = tasks[start : start + 64]
        replies += await asyncio.gather(
            *(
                _cancel_one(
                    msgspec.structs.replace(cmd, job_id=t.job_id), state, follower, bus, now
                )
                for t in chunk
            )
        )
    accepted = [r for r in replies if r.ok]
    if accepted:
        seq = max(r.seq or 0 for r in accepted)
        return CommandReply(status=202, job_id=cmd.job_id, seq=seq, state="CANCELLING")
    return replies[0]  # every task refused alike: FORBIDDEN, or ALREADY_TERMINAL


async def _cancel_one(
    cmd: CancelCommand, state: ClusterState, follower: Follower, bus: EventBus, now: float
) -> CommandReply:
    for _ in range(5):
        job = state.jobs.get(cmd.job_id)
        if job is None:
            await follower.catch_up()  # it may have been submitted a moment ago
            job = state.jobs.get(cmd.job_id)
        if job is None:
            job = await _ended_job(bus, cmd.job_id)  # gone from the hot state: ended (SPEC O6)
        if job is None:
            return error_reply("NOT_FOUND", f"no job {cmd.job_id}")
        answer = cancel_answer(cmd, job)
        if answer is not None:
            return answer
        event = cancel_requested(job, cmd.by, now, new_event_id())
        try:
            seq = await bus.append(event, expected_last_subject_seq=job.last_seq)
        except ConcurrencyConflict:
            await follower.catch_up()  # the job moved: look again
            continue
        return CommandReply(status=202, job_id=job.job_id, seq=seq, state="CANCELLING")
    return error_reply("INTERNAL", "the job kept changing; try again")


async def hold(
    cmd: HoldCommand, state: ClusterState, follower: Follower, bus: EventBus, now: float
) -> CommandReply:
    """JobHeld / JobReleased (SPEC Q9), with the job subject's expected sequence: a hold and a
    promotion racing on one job cannot both win."""
    for _ in range(5):
        job = state.jobs.get(cmd.job_id)
        if job is None:
            await follower.catch_up()
            job = state.jobs.get(cmd.job_id)
        if job is None:
            job = await _ended_job(bus, cmd.job_id)
        if job is None:
            return error_reply("NOT_FOUND", f"no job {cmd.job_id}")
        answer = hold_answer(cmd, job)
        if answer is not None:
            return answer
        event = hold_event(job, cmd, now, new_event_id())
        try:
            seq = await bus.append(event, expected_last_subject_seq=job.last_seq)
        except ConcurrencyConflict:
            await follower.catch_up()
            continue
        return CommandReply(status=200, job_id=job.job_id, seq=seq, state=job.state)
    return error_reply("INTERNAL", "the job kept changing; try again")
