"""Ride out a JetStream leader election (SPEC O3): one node of a cluster lost leaves a quorum, so
for a few seconds no leader answers — a request times out or finds no responders — and then the
new leader does. Such a request is sent again, each try bounded, for up to ELECTION_S.

A request sent while there is no leader is dropped, not queued for the leader to come, so what
the new leader answers is the first try sent *after* it was elected: the platform can follow its
bus only as closely as its tries are spaced. Waiting for one try to time out before sending the
next (2.5 s, then 0.5 s tries with pauses to 0.4 s) held answers up to ~0.9 s past the election,
and a call that began late in an election with a full 2.5 s first try up to 2.5 s. So:

  * a connection remembers when a request on it went unanswered, or it was lost (LeaderWatch):
    for SUSPECT_S after that, a call begins with short tries at once;
  * once suspect, a new try is sent every HEDGE (jittered, 0.03 s growing to 0.1 s) while the
    earlier ones are still out (each bounded by RETRY_S): the tries are the readiness probe, and
    the first answer wins. The server answers the same request once: an append keeps its
    Nats-Msg-Id (the stream stores it once, SPEC E2), a read is a read.

Measured figures: bench/bench_failover.py --platform, BENCHMARKS.md (Failover)."""

from __future__ import annotations

import asyncio
import logging
import random
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jpu.bus.errors import is_unreachable
from jpu.runtime.backoff import Backoff

log = logging.getLogger(__name__)

T = TypeVar("T")

# Longer than an election after a node's SIGKILL. nats-server's followers campaign when their
# election timer runs out: 4–9 s, randomised, from the last heartbeat (1 s apart), then a
# campaign of 0.1–0.8 s (server/raft.go, compile-time constants, not configurable): up to
# ~10.8 s, more on a loaded machine. Measured 4.1–8.0 s; with 10 s here, 2 appends in 7
# SIGKILLs gave up (bench/bench_failover.py, 2026-12-02, load average 4–5).
ELECTION_S = 12.0
TRY_S = 2.5  # a try on a connection that shows no sign of an election: a live leader answers in ms
RETRY_S = 0.5  # each try while the connection is suspect
HEDGE = Backoff(first_s=0.03, cap_s=0.1, jitter=0.3)  # between tries sent while suspect
SUSPECT_S = ELECTION_S  # after a request went unanswered, how long calls start short


class LeaderWatch:
    """One connection's sign of an election: when a request on it last went unanswered (a
    timeout, no responders) or the connection was lost. For SUSPECT_S after that, calls start
    with short, overlapping tries. Not cleared by an answer: during an election other streams'
    and buckets' leaders still answer, and a call begun then must not spend a whole TRY_S on the
    stream whose leader is gone. Pure: `now` is passed in."""

    def __init__(self) -> None:
        self.unanswered_at: float | None = None

    def suspect(self, now: float) -> bool:
        return self.unanswered_at is not None and now - self.unanswered_at < SUSPECT_S

    def unanswered(self, now: float) -> None:
        self.unanswered_at = now

    def try_s(self, now: float) -> float:
        return RETRY_S if self.suspect(now) else TRY_S

    def next_try_in(self, attempt: int, rand: float, now: float) -> float:
        """Seconds from sending try `attempt` (0-based) to sending the next one if none answered:
        a whole try while nothing looks wrong, a HEDGE step while the connection is suspect."""
        return HEDGE.delay(attempt, rand) if self.suspect(now) else TRY_S


_watches: weakref.WeakKeyDictionary[object, LeaderWatch] = weakref.WeakKeyDictionary()


def watch_of(connection: object) -> LeaderWatch:
    """The LeaderWatch of a NATS connection, shared by every call made on it."""
    watch = _watches.get(connection)
    if watch is None:
        watch = _watches[connection] = LeaderWatch()
    return watch


async def ride_out_election(
    call: Callable[[float], Awaitable[T]],
    what: str,
    *,
    give_up: asyncio.Event | None = None,
    bounds_itself: bool = False,
    watch: LeaderWatch | None = None,
) -> T:
    """`call(try_s)` until it answers, each try bounded by `try_s` (TRY_S, or RETRY_S while
    `watch` is suspect); with `bounds_itself` the call applies that bound itself (e.g. as a
    publish's ack timeout). While suspect, a new try goes out every HEDGE step with the earlier
    ones still out; the first answer wins and the others are cancelled. An unreachable error
    (jpu.bus.errors.is_unreachable) marks `watch` suspect and is retried; any other error is
    raised at once. After ELECTION_S (the tries still out allowed to finish), or once `give_up`
    is set, the last error is raised."""
    loop = asyncio.get_running_loop()
    watch = watch if watch is not None else LeaderWatch()
    deadline = loop.time() + ELECTION_S
    pending: set[asyncio.Future[T]] = set()
    last: BaseException | None = None
    attempt = 0

    def start() -> None:
        try_s = watch.try_s(loop.time())
        pending.add(asyncio.ensure_future(call(try_s) if bounds_itself else bounded(try_s)))

    async def bounded(try_s: float) -> T:  # in the try's own task: no inner task left behind
        async with asyncio.timeout(try_s):
            return await call(try_s)

    def next_step() -> float:
        return loop.time() + watch.next_try_in(attempt, random.random(), loop.time())

    try:
        start()
        next_at = next_step()
        while True:
            done: set[asyncio.Future[T]] = set()
            if pending:
                wait = None if loop.time() >= deadline else max(next_at - loop.time(), 0.0)
                done, _ = await asyncio.wait(
                    pending, timeout=wait, return_when=asyncio.FIRST_COMPLETED
                )
            elif loop.time() < deadline:
                await asyncio.sleep(max(next_at - loop.time(), 0.0))
            pending -= done
            errors = [e for e in (t.exception() for t in done) if e is not None]  # all retrieved
            answered = [t for t in done if t.exception() is None]
            if answered:
                return answered[0].result()
            for error in errors:
                if not is_unreachable(error) or (give_up is not None and give_up.is_set()):
                    raise error
            if errors:
                if last is None:  # once per call: its first try that got no answer
                    log.info("%s: no leader answered (%r); trying again", what, errors[0])
                watch.unanswered(loop.time())
                last = errors[-1]
                next_at = min(next_at, next_step())  # suspect now: a HEDGE step, not a whole try
            if loop.time() >= deadline:
                if not pending:
                    assert last is not None
                    log.warning("%s: no leader answered in %.1f s: %r", what, ELECTION_S, last)
                    raise last
                continue
            if loop.time() >= next_at:
                if pending and not watch.suspect(loop.time()):  # a whole try went unanswered
                    log.info("%s: no leader answered in %.1f s; trying again", what, TRY_S)
                    watch.unanswered(loop.time())
                elif pending and last is None and attempt == 0:
                    log.info("%s: no leader answered yet; trying again", what)
                attempt += 1
                start()
                next_at = next_step()
    finally:
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
