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
