"""Follow the stream in order from a position the *reader* owns, with no gap ever (SPEC E3, O5).

A projection or a folded state keeps its own position (`last_seq`, in PostgreSQL or in memory),
so the server must not be the one deciding what was "done": an acked durable may hand out later
messages before an unacked earlier one after a crash (redelivery waits for the ack wait), and a
"skip if <= position" would then skip an event it never applied. Instead each reader runs an
ephemeral, unacknowledged pull consumer starting at `position + 1` and checks that the consumer
sequence advances by exactly one per message: a fetch reply lost on the wire (reconnect, slow
client) shows as a jump, and the reader starts a new consumer right after the last message it
handed out. Server restarts and deleted consumers are handled the same way.

    async for batch in follow_ordered(bus.js, stream, "jpu.>", start_seq, stop):
        ...   # batch: messages in stream order, contiguous with the previous batch
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncGenerator

import nats.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.nuid import NUID

from jpu.bus.election import HEDGE, ride_out_election, watch_of

log = logging.getLogger(__name__)
_nuid = NUID()

_FETCH_TIMEOUT_S = 0.5  # a pull request's expiry; also the latency of noticing `stop`
_PULL_MIN = 1024  # messages per pull request (at least the caller's batch)
_INACTIVE_S = 30.0  # the server removes the consumer of a reader that died
_CHECK_EVERY = 10  # idle fetches between checks that the consumer still exists
_API_TIMEOUT_S = 2.0  # consumer create/info: a node lost mid-request is retried, not awaited


def sequences(m: Msg) -> tuple[int, int]:
    """`m.metadata.sequence` as (stream, consumer), read from the ack reply subject
    (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>`)
    without building the rest of nats-py's metadata (a `datetime` per message): the reader and
    a rebuild ask it of every message (SPEC E3, E6). Any other form: nats-py's own parse."""
    tokens = m.reply.split(".") if m.reply else []
    if len(tokens) == 9 and tokens[0] == "$JS" and tokens[1] == "ACK":
        return int(tokens[5]), int(tokens[6])
    seq = m.metadata.sequence
    return seq.stream, seq.consumer


class GapDetected(Exception):
    """The consumer skipped messages (a lost fetch reply); the reader restarts after the last."""


class ConsumerGone(Exception):
    """No one serves the consumer's pull requests (its node died, SPEC O3): resubscribe now."""


async def follow_ordered(
    js: JetStreamContext,
    stream: str,
    filter_subject: str,
    start_seq: int,
    stop: asyncio.Event,
    *,
    batch: int = 512,
) -> AsyncGenerator[list[Msg], None]:
    """Batches of messages in stream order from `start_seq` until `stop` is set.

    Never skips a message: every (re)subscription starts right after the last message yielded.
    Transient NATS errors are retried here; the caller only ever sees contiguous batches.
    One path for catch-up and live: the pipelined consumer (`_one_consumer`, 2–3× the rate of
    nats-py's `fetch`) serves both."""
    next_seq = max(start_seq, 1)
    while not stop.is_set():
        try:
            reader = _one_consumer(js, stream, filter_subject, next_seq, stop, batch)
            async with contextlib.aclosing(reader) as batches:
                async for msgs in batches:
                    next_seq = msgs[-1].metadata.sequence.stream + 1
                    yield msgs
            return  # stopped
        except (GapDetected, ConsumerGone, TimeoutError, nats.errors.Error, OSError) as e:
            log.warning("ordered reader: %r; resubscribing from seq %d", e, next_seq)
            # a pull or a consumer request went unanswered: the consumer's node or the stream's
            # leader may be lost, and its election under way — resubscribe with short tries
            watch_of(js._nc).unanswered(asyncio.get_running_loop().time())
            await asyncio.sleep(HEDGE.delay(0, random.random()))


class _Pull:
    """One pull consumer's deliveries, gathered by a subscription callback.

    nats-py's `fetch` awaits every message through a task and a timeout of its own (a third of a
    replay's time); here the client's reader hands each message to `_on_msg`, which only appends
    it, and a pull request for `size` messages is renewed as soon as the previous one is
    complete, so the server sends the next messages while the caller applies the last ones."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.msgs: list[Msg] = []
        self.owed = 0  # messages the open request may still bring (0: none open)
        self.arrived = asyncio.Event()
        self.gone = False  # a 503: the request reached no consumer

    async def on_msg(self, msg: Msg) -> None:
        status = msg.headers.get("Status") if msg.headers else None
        if status is not None and not msg.data:
            if status != "100":  # 404 no messages, 408 expired, 409 …: the request is over
                self.owed = 0
                self.gone = self.gone or status == "503"  # no responders
                self.arrived.set()
            return  # 100: an idle heartbeat or flow control (none asked for)
        self.msgs.append(msg)
        self.owed = max(self.owed - 1, 0)
        self.arrived.set()

    def take(self, most: int) -> list[Msg]:
        out, self.msgs = self.msgs[:most], self.msgs[most:]
        if not self.msgs:
            self.arrived.clear()
        return out


async def _one_consumer(
    js: JetStreamContext,
    stream: str,
    filter_subject: str,
    start_seq: int,
    stop: asyncio.Event,
    batch: int,
) -> AsyncGenerator[list[Msg], None]:
    nc = js._nc  # the JetStream context's connection (nats-py keeps no public accessor)
    # Each try names a new consumer: an R1 consumer is placed on one of the stream's peers, and
    # one placed on the node just lost never answers — a resend of the same name would wait on
    # it until the servers notice. The tries are short and overlap while the connection shows an
    # election (SPEC O3); a try that loses the race is dropped after _INACTIVE_S by the server.
    info = await ride_out_election(
        lambda try_s: js.add_consumer(stream, _ephemeral(filter_subject, start_seq), timeout=try_s),
        "ordered reader",
        bounds_itself=True,
        watch=watch_of(nc),
    )
    pull = _Pull(max(batch, _PULL_MIN))
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox, cb=pull.on_msg)
    request = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{info.name}"
    expires_ns = int(_FETCH_TIMEOUT_S * 1e9)
    expected = 1  # the consumer sequence of the next message
    idle = 0

    async def wake_on_stop() -> None:  # a stop is noticed at once, not at the request's expiry
        await stop.wait()
        pull.arrived.set()

    waker = asyncio.create_task(wake_on_stop())
    try:
        while not stop.is_set():
            if pull.owed == 0 and len(pull.msgs) < pull.size:  # the next request, early
                pull.owed = pull.size
                body = f'{{"batch":{pull.size},"expires":{expires_ns}}}'.encode()
                await nc.publish(request, body, reply=inbox)
            try:
                await asyncio.wait_for(pull.arrived.wait(), _FETCH_TIMEOUT_S + 1.0)
            except TimeoutError:  # no answer at all: a lost request (or a server restart)
                pull.owed = 0
                idle = _CHECK_EVERY - 1  # ask at once whether the consumer is still there
            msgs = pull.take(batch)
            if not msgs:  # the request expired empty (or was lost)
                if pull.gone:
                    raise ConsumerGone(f"consumer {info.name}: no responders")
                idle += 1
                if idle % _CHECK_EVERY == 0:
                    # A consumer the server dropped (restart, a caller that held a batch past
                    # the inactivity threshold) only ever times out: ask, and resubscribe.
                    # While the connection shows an election, a short bound: a request the
                    # dead leader dropped is not waited on (SPEC O3); the resubscription that
                    # follows a timeout starts right after the last message handed out.
                    now = asyncio.get_running_loop().time()
                    bound = min(_API_TIMEOUT_S, watch_of(nc).try_s(now))
                    await js.consumer_info(stream, info.name, timeout=bound)
                continue
            idle = 0
            for m in msgs:
                got = sequences(m)[1]
                if got != expected:
                    raise GapDetected(f"consumer seq {got}, expected {expected}")
                expected += 1
            yield msgs
    finally:
        waker.cancel()
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        _delete_later(js, stream, info.name)


_deleting: set[asyncio.Task[None]] = set()  # references, so the tasks are not collected


def _delete_later(js: JetStreamContext, stream: str, name: str) -> None:
    """Delete a consumer we no longer read, without waiting for it: when its node is gone the
    request would only time out, while the reader should resubscribe at once (SPEC O3). The
    server drops a consumer that is left behind after _INACTIVE_S anyway."""

    async def delete() -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(js.delete_consumer(stream, name), _API_TIMEOUT_S)

    task = asyncio.create_task(delete())
    _deleting.add(task)
    task.add_done_callback(_deleting.discard)


def _ephemeral(filter_subject: str, start_seq: int) -> ConsumerConfig:
    """An unacknowledged, in-memory consumer from `start_seq`: nothing depends on acks (E3)."""
    return ConsumerConfig(
        name=_nuid.next().decode(),
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=start_seq,
        ack_policy=AckPolicy.NONE,
        filter_subject=filter_subject,
        inactive_threshold=_INACTIVE_S,
        mem_storage=True,
        num_replicas=1,
    )
