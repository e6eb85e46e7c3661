"""The intake service loop (SPEC E4: validation Q1–Q3, personal queues, promotion Q5).

    run_intake(bus, config, clock, stop, pool=None)

Answers NATS request/reply on `<prefix>_cmd.submit`, `.cancel` and `.hold` (Q9; jpu.commands) in
the queue group `intake`, so any number of replicas share the load; follows the log into its own
ClusterState; promotes as soon as a slot frees or a job is submitted, and every second anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg
import msgspec
from nats.aio.msg import Msg

from jpu.backends.workdir_check import JobAccounts, sees_job_storage
from jpu.bus import Delivered, EventBus
from jpu.bus.errors import ConcurrencyConflict
from jpu.bus.fold_follow import Follower, SnapshotPolicy, caught_up
from jpu.commands import (
    QUEUE_GROUP,
    AppendCommand,
    CancelCommand,
    CommandReply,
    HoldCommand,
    MaintenanceCommand,
    SubmitCommand,
    append_subject,
    cancel_subject,
    decode_command,
    encode,
    error_reply,
    hold_subject,
    maintenance_subject,
    submit_subject,
)
from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.domain.promotion import personal_reason
from jpu.events import (
    JobCancelRequested,
    JobEnded,
    JobReleased,
    JobRetryDeclined,
    JobRetryScheduled,
    JobSubmitted,
)
from jpu.runtime.clock import Clock
from jpu_services.intake import maintenance
from jpu_services.intake.promote import Limits, Promoter
from jpu_services.intake.submit import cancel, hold, submit

log = logging.getLogger(__name__)

# nats-py awaits a subscription's callback before it delivers the next message; commands are
# handed to tasks instead, so a burst of submits waits on the log together rather than in turn.
MAX_IN_FLIGHT = 256
# A submit's own promotion round answers in milliseconds; one held up (its append riding out a
# NATS leader election) must not hold the accepted submit's answer: the loop promotes it later.
PROMOTE_WAIT_S = 2.0

# Events that may free a slot; an OOM end keeps it until the retry is decided (X8); or make a
# job eligible (Q9 release; Q8's parents wake their children's users through the fold).
_SLOT_EVENTS = (
    JobSubmitted,
    JobEnded,
    JobCancelRequested,
    JobRetryScheduled,
    JobRetryDeclined,
    JobReleased,
)


class Intake:
    def __init__(
        self,
        bus: EventBus,
        config: Config,
        clock: Clock,
        pool: asyncpg.Pool | None,
        workdir_check: bool = True,
    ) -> None:
        self.bus, self.config, self.clock = bus, config, clock
        # U5, X4: the account a job runs as, to look at its chdir as that account would
        self.accounts = JobAccounts(config, enabled=workdir_check, sees_storage=sees_job_storage())
        self.state = ClusterState.new(config, keep_ended=False)  # SPEC O6
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()
        self.follower = Follower(
            bus, self.state, self._on_event, snapshots=SnapshotPolicy.from_config(bus, config)
        )
        self.promoter = Promoter(bus, self.state, Limits(config, pool))
        self.lock = asyncio.Lock()  # one promotion round at a time per process
        self._round: asyncio.Future[list[str]] | None = None  # the next round, not yet started
        self._round_users: set[str] = set()
        self._rounds: set[asyncio.Task[None]] = set()
        self.in_flight: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)  # beyond it, the subscription waits

    def _on_event(self, d: Delivered) -> None:
        if isinstance(d.event, JobSubmitted):  # an array's id is no job: its tasks are (Q7)
            self.dirty.add(d.event.user)
            self.wake.set()
        elif isinstance(d.event, _SLOT_EVENTS):
            job = self.state.job_seen(d.event.job_id)
            if job is not None:
                self.dirty.add(job.user)
                self.wake.set()
        if self.state.just_woken:  # Q8: users of the jobs a parent's step resolved
            self.dirty.update(self.state.just_woken)
            self.wake.set()

    async def promote(self, users: set[str] | None) -> list[str]:
        async with self.lock:
            await self.follower.wait_for(self.promoter.max_seq)  # see our own promotions
            return await self.promoter.promote(users, self.clock.now())

    async def promotion_round(self) -> None:
        """One round of the promotion loop over the users marked dirty (all users when none).
        A round that fails — its follower wait or append timed out under load or during a NATS
        leader election (SPEC O3) — must not stop intake: its users stay dirty and the next round,
        a second later, decides again from the log (appends carry the expected sequence, E2, so
        nothing is promoted twice)."""
        users, self.dirty = self.dirty, set()
        try:
            await self.promote(users or None)
        except Exception as e:
            log.warning("promotion round failed; retried in the next round: %r", e)
            self.dirty |= users

    async def promote_joined(self, user: str) -> list[str]:
        """Promote for `user` in the next round (single flight): submits arriving while a round
        runs share the following one, instead of one round (a follower wait and an append) each.
        Q5 is per user, so one round over the union decides what rounds per user would."""
        self._round_users.add(user)
        if self._round is None:
            self._round = asyncio.get_running_loop().create_future()
            # a submit that stopped waiting (PROMOTE_WAIT_S) leaves a failed round unread
            self._round.add_done_callback(_retrieve)
            task = asyncio.create_task(self._run_round(self._round))
            self._rounds.add(task)  # a reference, so the task is not collected mid-round
            task.add_done_callback(self._rounds.discard)
        return await asyncio.shield(self._round)

    async def _run_round(self, fut: asyncio.Future[list[str]]) -> None:
        async with self.lock:
            users, self._round_users, self._round = self._round_users, set(), None
            try:
                await self.follower.wait_for(self.promoter.max_seq)  # see our own promotions
                fut.set_result(await self.promoter.promote(users, self.clock.now()))
            except Exception as e:
                fut.set_exception(e)

    async def handle(self, msg: Msg) -> None:
        """Subscription callback: answer `msg` in its own task. Concurrent decisions are safe:
        every append carries the job subject's expected sequence (SPEC E2)."""
        await self._slots.acquire()
        task = asyncio.create_task(self.answer(msg))
        self.in_flight.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.in_flight.discard(task)
        self._slots.release()

    async def answer(self, msg: Msg) -> None:
        try:
            cmd = decode_command(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            await msg.respond(encode(error_reply("BAD_REQUEST", f"not a command: {e}")))
            return
        try:
            reply = await self._decide(cmd)
        except Exception as e:  # answer rather than let the gateway time out
            log.exception("intake command failed")
            reply = error_reply("INTERNAL", f"intake failed: {type(e).__name__}")
        await msg.respond(encode(reply))

    async def _decide(
        self, cmd: SubmitCommand | CancelCommand | HoldCommand | AppendCommand | MaintenanceCommand
    ) -> CommandReply:
        now = self.clock.now()
        if isinstance(cmd, AppendCommand):  # SPEC SEC2: the gateway's events, appended here
            return await self._append(cmd)
        if isinstance(cmd, MaintenanceCommand):  # M1/M4, the admin's side (SEC2)
            return await maintenance.decide(self.bus, cmd, now)
        if isinstance(cmd, CancelCommand):
            return await cancel(cmd, self.state, self.follower, self.bus, now)
        if isinstance(cmd, HoldCommand):
            return await hold(cmd, self.state, self.follower, self.bus, now)  # Q9
        if cmd.max_active_jobs is not None:
            self.promoter.limits.table.setdefault(cmd.user, cmd.max_active_jobs)
        reply = await submit(
            cmd, self.state, self.bus, self.config, now, self.accounts, self.follower
        )
        return await self._with_job(await self._promoted(cmd, reply))

    async def _with_job(self, reply: CommandReply) -> CommandReply:
        """The accepted job as the fold holds it once it folded the submit and its promotion
        (its state, D7 reason), so the gateway can answer without a projection read; a fold
        still behind after a second answers without it (the gateway then reads the projection,
        as for a replay)."""
        event = reply.submitted
        if event is None:
            return reply
        needed = max(reply.seq or 0, self.promoter.max_seq)  # the submit and its promotion
        if self.state.seq < needed:
            with contextlib.suppress(TimeoutError):
                await self.follower.wait_for(needed, timeout=1.0)
        job = self.state.jobs.get(event.job_id)
        if job is None or self.state.seq < needed:
            return msgspec.structs.replace(reply, submitted=None)
        waiting = job.state == "PERSONAL_QUEUE_WAIT"
        reason = personal_reason(self.state, job) if waiting else None  # D7 (Q5, Q8, Q9)
        return msgspec.structs.replace(reply, job=job, state=job.state, pending_reason=reason)

    async def _promoted(self, cmd: SubmitCommand, reply: CommandReply) -> CommandReply:
        if reply.status == 201 and reply.seq is not None:
            try:
                await self.follower.wait_for(reply.seq, timeout=5.0)
            except TimeoutError:  # accepted anyway; the promotion loop will promote it
                self.dirty.add(cmd.user)
                self.wake.set()
                return reply
            try:  # Q5: at once if a slot is free
                promoted = await asyncio.wait_for(self.promote_joined(cmd.user), PROMOTE_WAIT_S)
            except Exception as e:  # a round slowed by a NATS leader election (SPEC O3)
                log.warning("submit accepted; its promotion left to the loop: %r", e)
                self.dirty.add(cmd.user)
                self.wake.set()
                return reply
            job = self.state.jobs.get(reply.job_id or "")
            if reply.job_id in promoted:
                reply = msgspec.structs.replace(reply, state="GLOBAL_QUEUE_WAIT")
            elif job is not None and job.state != reply.state:  # by a concurrent submit's round
                reply = msgspec.structs.replace(reply, state=job.state)
        return reply

    async def _append(self, cmd: AppendCommand) -> CommandReply:
        expected = cmd.expected_last_subject_seq
        try:
            seq = await self.bus.append(cmd.event, expected_last_subject_seq=expected)
        except ConcurrencyConflict as e:
            return error_reply("CONFLICT", str(e), {"expected_last_subject_seq": expected})
        return CommandReply(status=201, seq=seq)


def _retrieve(fut: asyncio.Future[list[str]]) -> None:
    if not fut.cancelled():
        fut.exception()  # marks it retrieved; the loop re-decides its users (promotion_round)


async def run_intake(
    bus: EventBus,
    config: Config,
    clock: Clock,
    stop: asyncio.Event,
    *,
    pool: asyncpg.Pool | None = None,
    workdir_check: bool = True,
) -> None:
    """`workdir_check` False: this host does not share the nodes' Unix accounts (U5: the node
    decides at launch); SEC1's roots are checked all the same."""
    intake = Intake(bus, config, clock, pool, workdir_check)
    await intake.follower.restore()  # SPEC O6: the newest snapshot, then only the log's tail
    follow = asyncio.create_task(intake.follower.run(stop))
    subs = []
    try:
        await caught_up(intake.follower, "intake")
        subjects = (
            submit_subject(bus.prefix),
            cancel_subject(bus.prefix),
            hold_subject(bus.prefix),
            append_subject(bus.prefix),
            maintenance_subject(bus.prefix),
        )
        for subject in subjects:
            subs.append(await bus.nc.subscribe(subject, queue=QUEUE_GROUP, cb=intake.handle))
        intake.wake.set()  # the first round promotes whatever waited while no intake ran
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(intake.wake.wait(), 1.0)
            intake.wake.clear()
            await intake.promotion_round()
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if intake.in_flight:  # answer what was accepted before the follower stops
            await asyncio.wait(set(intake.in_flight), timeout=10.0)
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
