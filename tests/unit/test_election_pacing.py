"""Riding out a JetStream leader election (jpu.bus.election; SPEC O3): a request dropped while no
leader answers is tried again at short, jittered steps with the earlier tries still out, so the
answer comes within a step of the new leader — not a whole try or a long pause later."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest

from jpu.bus import election
from jpu.bus.election import (
    HEDGE,
    RETRY_S,
    SUSPECT_S,
    TRY_S,
    LeaderWatch,
    ride_out_election,
)


class Leaderless:
    """A stand-in server (the request's far side, not the code under test): a request sent
    before `elected_at` is dropped (never answered; the try's own bound ends it), one sent
    after is answered at once."""

    def __init__(self, loop: asyncio.AbstractEventLoop, election_s: float) -> None:
        self.elected_at = loop.time() + election_s
        self.loop = loop
        self.sent: list[tuple[float, float]] = []  # (when, bound)

    async def request(self, try_s: float) -> float:
        now = self.loop.time()
        self.sent.append((now, try_s))
        if now < self.elected_at:
            await asyncio.sleep(try_s)
            raise nats.errors.TimeoutError
        return now


def test_O3_watch_is_suspect_for_a_while_after_no_answer() -> None:
    w = LeaderWatch()
    assert not w.suspect(0.0) and w.try_s(0.0) == TRY_S and w.next_try_in(0, 0.5, 0.0) == TRY_S
    w.unanswered(10.0)
    w.unanswered(11.0)
    assert w.suspect(11.5) and w.try_s(11.5) == RETRY_S
    assert HEDGE.first_s * 0.7 <= w.next_try_in(0, 0.0, 11.5) <= HEDGE.cap_s * 1.3
    assert all(w.next_try_in(n, 0.999, 12.0) <= HEDGE.cap_s * 1.3 for n in range(50))  # bounded
    assert w.suspect(11.0 + SUSPECT_S - 0.01)  # from the last unanswered request
    assert not w.suspect(11.0 + SUSPECT_S) and w.try_s(11.0 + SUSPECT_S) == TRY_S


async def test_O3_answer_follows_the_election_within_a_hedge_step() -> None:
    loop = asyncio.get_running_loop()
    server = Leaderless(loop, election_s=3.2)
    watch = LeaderWatch()
    answered_at = await ride_out_election(server.request, "append", watch=watch)
    late = answered_at - server.elected_at
    assert 0 <= late <= HEDGE.cap_s * (1 + HEDGE.jitter) + 0.05, late
    assert watch.suspect(loop.time())  # calls begun soon after start short too
    # the first try was a whole one; once it went unanswered the tries overlapped, each short
    assert server.sent[0][1] == TRY_S and all(b == RETRY_S for _, b in server.sent[1:])
    gaps = [b[0] - a[0] for a, b in zip(server.sent[1:], server.sent[2:], strict=False)]
    assert gaps and max(gaps) <= HEDGE.cap_s * (1 + HEDGE.jitter) + 0.05


async def test_O3_a_call_begun_late_in_an_election_starts_short() -> None:
    """Another request on the connection already went unanswered: a new call does not spend a
    whole first try (TRY_S) on a leader that is not there."""
    loop = asyncio.get_running_loop()
    server = Leaderless(loop, election_s=0.6)
    watch = LeaderWatch()
    watch.unanswered(loop.time())
    answered_at = await ride_out_election(server.request, "read", watch=watch)
    assert server.sent[0][1] == RETRY_S
    assert answered_at - server.elected_at <= HEDGE.cap_s * (1 + HEDGE.jitter) + 0.05


async def test_O3_no_responders_is_retried_at_a_step_not_after_a_whole_try() -> None:
    loop = asyncio.get_running_loop()
    until = loop.time() + 0.5
    calls: list[float] = []

    async def no_responders_then_answer(try_s: float) -> str:
        calls.append(loop.time())
        if loop.time() < until:
            raise nats.errors.NoRespondersError
        return "ok"

    t0 = loop.time()
    assert await ride_out_election(no_responders_then_answer, "read") == "ok"
    assert loop.time() - t0 < 0.5 + HEDGE.cap_s * (1 + HEDGE.jitter) + 0.1
    assert len(calls) < 30  # paced, not a busy loop


async def test_O3_a_verdict_is_raised_at_once_and_the_other_tries_are_cancelled() -> None:
    loop = asyncio.get_running_loop()
    cancelled: list[bool] = []

    async def call(try_s: float) -> None:
        if not cancelled:
            cancelled.append(False)
            try:
                await asyncio.sleep(try_s)
            except asyncio.CancelledError:
                cancelled[0] = True
                raise
            raise nats.errors.TimeoutError
        raise PermissionError("not allowed")

    watch = LeaderWatch()
    watch.unanswered(loop.time())
    with pytest.raises(PermissionError):
        await ride_out_election(call, "append", watch=watch)
    assert cancelled == [True]


async def test_O3_gives_up_after_the_election_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(election, "ELECTION_S", 0.4)

    async def never(try_s: float) -> None:
        await asyncio.sleep(try_s)
        raise nats.errors.TimeoutError

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(TimeoutError):  # the last try's own (nats' subclasses it)
        await ride_out_election(never, "append", watch=LeaderWatch())
    assert loop.time() - t0 < TRY_S + RETRY_S + 0.3  # the tries still out end within their bound


async def test_O3_stops_trying_once_told_to_give_up() -> None:
    give_up = asyncio.Event()
    give_up.set()

    async def unreachable(try_s: float) -> None:
        raise nats.errors.NoRespondersError

    with pytest.raises(nats.errors.NoRespondersError):
        await ride_out_election(unreachable, "append", give_up=give_up)
