"""An accepted submit is answered even when its promotion round is held up (SPEC Q5, O3): e.g.
the round's append riding out a NATS leader election. The promotion loop promotes it later."""

from __future__ import annotations

import asyncio

from jpu.bus import EventBus
from jpu.commands import SubmitCommand
from jpu.runtime.clock import FakeClock
from jpu.testing.intake import BODY, config_with_limits
from jpu_services.intake.service import Intake

ANSWER_BOUND_S = 5.0  # intake gives its own round 2 s (PROMOTE_WAIT_S)


async def test_Q5_O3_submit_is_answered_while_its_promotion_round_is_held_up(bus: EventBus):
    intake = Intake(bus, config_with_limits(), FakeClock(1000.0), None)
    stop = asyncio.Event()
    follow = asyncio.create_task(intake.follower.run(stop))
    try:
        async with intake.lock:  # a promotion round in progress that does not finish
            cmd = SubmitCommand(user="alice", lab="BCG", body=BODY)
            reply = await asyncio.wait_for(intake._decide(cmd), ANSWER_BOUND_S)
        assert reply.status == 201 and reply.state == "PERSONAL_QUEUE_WAIT", reply
        assert "alice" in intake.dirty  # the promotion loop takes it from here
    finally:
        stop.set()
        await asyncio.wait_for(follow, 10)


async def test_Q5_O3_a_failed_promotion_round_leaves_intake_running_and_promotes_later(
    bus: EventBus,
):
    """The promotion loop's round times out (here: it waits to see a sequence the log has not
    reached, as a round does when the follower lags under load); intake keeps running, the user
    stays marked, and once rounds succeed again the job is promoted."""
    intake = Intake(bus, config_with_limits(), FakeClock(1000.0), None)
    stop = asyncio.Event()
    follow = asyncio.create_task(intake.follower.run(stop))
    try:
        async with intake.lock:  # accepted while a round holds the lock: left to the loop
            reply = await intake._decide(SubmitCommand(user="alice", lab="BCG", body=BODY))
        assert reply.status == 201 and "alice" in intake.dirty, reply
        real = intake.promoter.max_seq
        intake.promoter.max_seq = real + 1_000_000  # a sequence the log will not reach in time
        await intake.promotion_round()  # raised TimeoutError inside; must not propagate
        assert "alice" in intake.dirty  # still owed a decision
        assert reply.job_id is not None and intake.state.jobs[reply.job_id].state == (
            "PERSONAL_QUEUE_WAIT"
        )
        intake.promoter.max_seq = real
        await intake.promotion_round()
        await intake.follower.wait_for(intake.promoter.max_seq)
        assert intake.state.jobs[reply.job_id].state == "GLOBAL_QUEUE_WAIT"
        assert not intake.dirty
    finally:
        stop.set()
        await asyncio.wait_for(follow, 10)
