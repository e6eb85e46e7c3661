"""Ride out a JetStream leader election (SPEC O3): one node of a cluster lost leaves a quorum, so
for a few seconds no leader answers — a request times out or finds no responders — and then the
new leader does. Such a request is sent again, each try bounded, for up to ELECTION_S."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from jpu.bus.errors import is_unreachable

log = logging.getLogger(__name__)

T = TypeVar("T")

ELECTION_S = 10.0  # longer than an election after a node's SIGKILL (measured 4–9 s)
TRY_S = 2.5  # one try: an answer from a live leader comes in milliseconds


async def ride_out_election(
    call: Callable[[], Awaitable[T]],
    what: str,
    *,
    give_up: asyncio.Event | None = None,
    try_s: float | None = TRY_S,
) -> T:
    """`call()` until it answers; an unreachable error (jpu.bus.errors.is_unreachable) is retried
    with a backoff of 0.1 s doubling to 1 s, any other error raised at once. After ELECTION_S, or
    once `give_up` is set, the last error is raised. `try_s=None`: the call bounds itself."""
    loop = asyncio.get_running_loop()
    deadline, delay = loop.time() + ELECTION_S, 0.1
    while True:
        try:
            if try_s is None:
                return await call()
            return await asyncio.wait_for(call(), try_s)
        except Exception as e:
            if not is_unreachable(e) or (give_up is not None and give_up.is_set()):
                raise
            if loop.time() + delay > deadline:
                raise
            log.info("%s: no leader answered (%r); trying again", what, e)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 1.0)
