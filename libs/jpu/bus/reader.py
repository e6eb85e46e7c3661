"""Read a range of a stream in order through an ephemeral, unacknowledged pull consumer.

Used for replay (SPEC E6), a job's audit trail and the DLQ listing. The range ends at the stream's
last sequence at the time of the call, so a reader never chases a live stream forever.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError, ServiceUnavailableError
from nats.nuid import NUID

from jpu.bus.election import ELECTION_S, TRY_S, ride_out_election, watch_of

_FETCH = 512
nuid = NUID()
_FETCH_TIMEOUT_S = 2.0
_UNAVAILABLE_PAUSE_S = 0.1


async def read_range(
    js: JetStreamContext, stream: str, filter_subject: str, start_seq: int = 1
) -> AsyncGenerator[Msg, None]:
    """Messages of `stream` matching `filter_subject` from `start_seq` to the current last seq."""
    watch = watch_of(js._nc)  # the JetStream context's connection (no public accessor)
    last = (
        await ride_out_election(lambda _: js.stream_info(stream), "read", watch=watch)
    ).state.last_seq
    if last < max(start_seq, 1):
        return

    def config() -> ConsumerConfig:  # a new name each try (see jpu.bus.ordered, SPEC O3)
        return ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=max(start_seq, 1),
            ack_policy=AckPolicy.NONE,
            filter_subject=filter_subject,
            inactive_threshold=60.0,  # the server cleans up after a reader that died
            mem_storage=True,
            num_replicas=1,
            name=nuid.next().decode(),
        )

    info = await ride_out_election(
        lambda try_s: js.add_consumer(stream, config(), timeout=try_s),
        "read",
        bounds_itself=True,
        watch=watch,
    )
    if info.num_pending == 0:
        await _delete(js, stream, info.name)
        return
    sub = await js.pull_subscribe_bind(consumer=info.name, stream=stream)
    try:
        async for msg in _until(sub, last):
            yield msg
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        await _delete(js, stream, info.name)


async def _until(sub: JetStreamContext.PullSubscription, last: int) -> AsyncGenerator[Msg, None]:
    loop = asyncio.get_running_loop()
    unavailable_until = loop.time() + ELECTION_S
    while True:
        try:
            msgs = await sub.fetch(_FETCH, timeout=_FETCH_TIMEOUT_S)
        except TimeoutError:  # nats.errors.TimeoutError or a bare asyncio one from fetch
            return  # nothing more arrived: the filtered range is exhausted
        except ServiceUnavailableError:
            # A consumer created right after a leader election may answer 503 until its
            # assignment settles (SPEC O3): ask again within the election window.
            if loop.time() > unavailable_until:
                raise
            await asyncio.sleep(_UNAVAILABLE_PAUSE_S)
            continue
        for msg in msgs:
            meta = msg.metadata
            if meta.sequence.stream > last:
                return
            yield msg
            # num_pending counts matching messages after this one; any of them with a sequence
            # ≤ last existed when we started, so 0 means the range is complete.
            if meta.sequence.stream == last or meta.num_pending == 0:
                return


async def _delete(js: JetStreamContext, stream: str, name: str) -> None:
    """Bounded: a consumer on a lost node cannot answer (the server drops it when inactive)."""
    with contextlib.suppress(NotFoundError, nats.errors.Error, TimeoutError):
        await asyncio.wait_for(js.delete_consumer(stream, name), TRY_S)
