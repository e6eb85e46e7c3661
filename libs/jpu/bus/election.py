"""Ride out a JetStream leader election (SPEC O3): one node of a cluster lost leaves a quorum, so
for a few seconds no leader answers — a request times out or finds no responders — and then the
new leader does. Such a request is sent again, each try bounded, for up to ELECTION_S.

Why the later tries are short: a request sent while there is no leader is dropped, not queued
for the leader to come, so what the new leader answers is the first try sent *after* it was
elected. With 2.5 s tries that came up to 2.5 s + the pause after the election ended (measured:
submits accepted 5.3–5.7 s after a leader's SIGKILL for elections of ~4.5 s); with RETRY_S tries
it is at most RETRY_S + the pause. A try that a live but slow leader answers late is not lost
either: the resend is the same request (an append keeps its Nats-Msg-Id, the stream stores it
once), and each new call starts with a full TRY_S try again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jpu.bus.errors import is_unreachable

log = logging.getLogger(__name__)

T = TypeVar("T")

# Longer than an election after a node's SIGKILL. nats-server's followers campaign when their
# election timer runs out: 4–9 s, randomised, from the last heartbeat (1 s apart), then a
# campaign of 0.1–0.8 s (server/raft.go, compile-time constants, not configurable): up to
# ~10.8 s, more on a loaded machine. Measured 4.1–8.0 s; with 10 s here, 2 appends in 7
# SIGKILLs gave up (bench/bench_failover.py, 2026-12-02, load average 4–5).
ELECTION_S = 12.0
TRY_S = 2.5  # the first try: an answer from a live leader comes in milliseconds
RETRY_S = 0.5  # each later try, once one went unanswered (an election is likely under way)
_PAUSE_S, _MAX_PAUSE_S = 0.05, 0.4  # between tries: no responders fails at once


async def ride_out_election(
    call: Callable[[float], Awaitable[T]],
    what: str,
    *,
    give_up: asyncio.Event | None = None,
    bounds_itself: bool = False,
) -> T:
    """`call(try_s)` until it answers, each try bounded by `try_s` (TRY_S, then RETRY_S); with
    `bounds_itself` the call applies that bound itself (e.g. as a publish's ack timeout). An
    unreachable error (jpu.bus.errors.is_unreachable) is retried after a pause of 0.05 s doubling
    to 0.4 s, any other error raised at once. After ELECTION_S, or once `give_up` is set, the
    last error is raised."""
    loop = asyncio.get_running_loop()
    deadline, delay, try_s = loop.time() + ELECTION_S, _PAUSE_S, TRY_S
    while True:
        try:
            if bounds_itself:
                return await call(try_s)
            return await asyncio.wait_for(call(try_s), try_s)
        except Exception as e:
            if not is_unreachable(e) or (give_up is not None and give_up.is_set()):
                raise
            if loop.time() + delay > deadline:
                raise
            log.info("%s: no leader answered (%r); trying again", what, e)
        await asyncio.sleep(delay)
        delay, try_s = min(delay * 2, _MAX_PAUSE_S), RETRY_S
