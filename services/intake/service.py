"""The intake service loop (SPEC E4: validation Q1–Q3, personal queues, promotion Q5).

    run_intake(bus, config, clock, stop, pool=None)

Answers NATS request/reply on `<prefix>_cmd.submit` and `<prefix>_cmd.cancel` (jpu.commands) in
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

from jpu.bus import Delivered, EventBus
from jpu.clock import Clock
from jpu.commands import (
    QUEUE_GROUP,
    CancelCommand,
    CommandReply,
    SubmitCommand,
    cancel_subject,
    decode_command,
    encode,
    error_reply,
    submit_subject,
)
from jpu.config import Config
from jpu.events import JobCancelRequested, JobEnded, JobRetryScheduled, JobSubmitted
from jpu.fold import ClusterState
from jpu.fold_follow import Follower
from jpu_services.intake.promote import Limits, Promoter
from jpu_services.intake.submit import cancel, submit

log = logging.getLogger(__name__)

_SLOT_EVENTS = (JobSubmitted, JobEnded, JobCancelRequested, JobRetryScheduled)


class Intake:
    def __init__(
        self, bus: EventBus, config: Config, clock: Clock, pool: asyncpg.Pool | None
    ) -> None:
        self.bus, self.config, self.clock = bus, config, clock
        self.state = ClusterState.new(config)
        self.dirty: set[str] = set()
        self.wake = asyncio.Event()
        self.follower = Follower(bus, self.state, self._on_event)
        self.promoter = Promoter(bus, self.state, Limits(config, pool))
        self.lock = asyncio.Lock()  # one promotion round at a time per process

    def _on_event(self, d: Delivered) -> None:
        if isinstance(d.event, _SLOT_EVENTS):
            job = self.state.jobs.get(d.event.job_id)
            if job is not None:
                self.dirty.add(job.user)
                self.wake.set()

    async def promote(self, users: set[str] | None) -> list[str]:
        async with self.lock:
            await self.follower.wait_for(self.promoter.max_seq)  # see our own promotions
            return await self.promoter.promote(users, self.clock.now())

    async def handle(self, msg: Msg) -> None:
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

    async def _decide(self, cmd: SubmitCommand | CancelCommand) -> CommandReply:
        now = self.clock.now()
        if isinstance(cmd, CancelCommand):
            return await cancel(cmd, self.state, self.follower, self.bus, now)
        if cmd.max_active_jobs is not None:
            self.promoter.limits.table.setdefault(cmd.user, cmd.max_active_jobs)
        reply = await submit(cmd, self.state, self.bus, self.config, now)
        if reply.status == 201 and reply.seq is not None:
            try:
                await self.follower.wait_for(reply.seq, timeout=5.0)
            except TimeoutError:  # accepted anyway; the promotion loop will promote it
                self.dirty.add(cmd.user)
                self.wake.set()
                return reply
            promoted = await self.promote({cmd.user})  # Q5: promoted at once if a slot is free
            if reply.job_id in promoted:
                reply = msgspec.structs.replace(reply, state="GLOBAL_QUEUE_WAIT")
        return reply


async def run_intake(
    bus: EventBus,
    config: Config,
    clock: Clock,
    stop: asyncio.Event,
    *,
    pool: asyncpg.Pool | None = None,
) -> None:
    intake = Intake(bus, config, clock, pool)
    follow = asyncio.create_task(intake.follower.run(stop))
    subs = []
    try:
        await intake.follower.catch_up(timeout=120.0)
        for subject in (submit_subject(bus.prefix), cancel_subject(bus.prefix)):
            subs.append(await bus.nc.subscribe(subject, queue=QUEUE_GROUP, cb=intake.handle))
        await intake.promote(None)  # whatever waited while no intake ran
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(intake.wake.wait(), 1.0)
            intake.wake.clear()
            users, intake.dirty = intake.dirty, set()
            await intake.promote(users or None)
    finally:
        for sub in subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        follow.cancel()
        await asyncio.gather(follow, return_exceptions=True)
