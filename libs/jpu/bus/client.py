"""EventBus: the JetStream event log of SPEC E2 — append with dedup and optimistic concurrency,
durable consumers, replay. One connection per bus; safe to share within one event loop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec
from nats.aio.client import NATS_HDR_LINE_SIZE
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import RawStreamMsg
from nats.js.errors import APIError, NotFoundError

from jpu.bus import auth, streams
from jpu.bus.consumer import ConsumerSpec, run_consumer
from jpu.bus.dlq import read_parked
from jpu.bus.election import TRY_S, ride_out_election, watch_of
from jpu.bus.errors import ConcurrencyConflict, is_unreachable, is_wrong_last_sequence
from jpu.bus.model import H_EXPECTED_LAST_SUBJECT_SEQ, H_MSG_ID, Delivered, ParkedMessage
from jpu.bus.reader import read_range
from jpu.domain.arrays import split_task_id, task_of
from jpu.events import Event, JobSubmitted, decode, encode, subject_for
from jpu.runtime.telemetry import inject_headers

log = logging.getLogger(__name__)
T = TypeVar("T")

_ACK_TIMEOUT_S = 10.0  # a JetStream API request (stream/consumer info, reads, many acks)
_RETRY_MAX_DELAY_S = 5.0  # append_retrying: backoff 0.2 s doubling up to this
CLOSE_TIMEOUT_S = 5.0  # close(): the drain, then the close itself, each at most this long
# A node that dies without closing its sockets (a host lost, a frozen process) is noticed only by
# pings: nats-py's defaults (every 120 s, 2 unanswered) left a client on it for minutes, every
# request timing out, while the cluster had long elected new leaders (SPEC O3). Every 2 s with
# 2 unanswered: a dead connection is given up within about 6 s, close to the election itself.
PING_INTERVAL_S = 2.0
MAX_OUTSTANDING_PINGS = 2


class _WithoutHeaders(NATS):
    """A connection for a reader that folds only the events (the audit replay, SPEC E6: the
    projections read no header): a message's own headers are dropped unparsed — nats-py's
    header parsing was about a sixth of a replay — while the server's status lines (no
    messages, request expired, no responders, heartbeats) are parsed as ever."""

    async def _process_headers(self, headers: bytes) -> dict[str, str] | None:
        if not headers or headers[NATS_HDR_LINE_SIZE : NATS_HDR_LINE_SIZE + 1] != b" ":
            return None  # none, or `NATS/1.0\r\n<headers>`: no status line
        return await super()._process_headers(headers)


class EventBus:
    def __init__(self, nc: NATS, *, stream: str, prefix: str, replicas: int | None = None) -> None:
        self.nc = nc
        self.js: JetStreamContext = nc.jetstream(timeout=_ACK_TIMEOUT_S)
        self.stream = stream
        self.prefix = prefix
        self.dlq_stream = f"{stream}_DLQ"
        self._replicas = replicas
        self._closing = asyncio.Event()
        self.user = ""  # the NATS identity; "" anonymous (SPEC SEC2)

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        stream: str = "JPU",
        prefix: str = "jpu",
        name: str | None = None,
        replicas: int | None = None,
        randomize: bool = True,
        headers: bool = True,
        tls_files: tuple[str, str, str] = ("", "", ""),
    ) -> EventBus:
        """Connect, reconnecting forever once connected; `url` may list servers (a,b,c), tried
        in a random order unless `randomize` is False (then the first one first). With
        `headers=False` messages arrive without their headers (see _WithoutHeaders)."""
        closing = asyncio.Event()  # a drain on close() is not worth a warning

        async def disconnected() -> None:
            if not closing.is_set():
                log.warning("disconnected from NATS; reconnecting")
                # the node may have led streams: their elections are likely under way, so the
                # next requests start with short, overlapping tries (jpu.bus.election)
                watch_of(nc).unanswered(asyncio.get_running_loop().time())

        options: dict[str, Any] = {  # nats-py types the intervals int; they take seconds
            "name": name,
            "max_reconnect_attempts": -1,
            "reconnect_time_wait": 0.5,
            "ping_interval": PING_INTERVAL_S,
            "max_outstanding_pings": MAX_OUTSTANDING_PINGS,
            "dont_randomize": not randomize,
            "error_cb": _log_error,
            "disconnected_cb": disconnected,
            "reconnected_cb": _reconnected,
            **auth.client_options(tls_files=tls_files),  # SPEC SEC2: own identity, TLS
        }
        nc = NATS() if headers else _WithoutHeaders()
        await nc.connect([u.strip() for u in url.split(",") if u.strip()], **options)
        bus = cls(nc, stream=stream, prefix=prefix, replicas=replicas)
        bus._closing = closing
        bus.user = options.get("user") or ""
        return bus

    # --- streams ----------------------------------------------------------------------------

    async def ensure_stream(self) -> None:
        """Create or update the event stream and its DLQ (proto-schemas/streams.json). A service's
        identity may not (SPEC SEC2: the admin's `prepare` did): it only checks they exist."""
        if self.user not in ("", auth.ADMIN):
            for name in (self.stream, self.dlq_stream):
                await self.js.stream_info(name)
            return
        for kind, name in (("event_stream", self.stream), ("dlq_stream", self.dlq_stream)):
            config = streams.stream_config(kind, self.stream, self.prefix, self._replicas)
            assert config.name == name
            await streams.ensure(self.js, config)

    async def delete_stream(self) -> None:
        """Tests only: remove both streams."""
        for name in (self.stream, self.dlq_stream):
            with contextlib.suppress(NotFoundError):
                await self.js.delete_stream(name)

    async def _ride_out(self, call: Callable[[float], Awaitable[T]], what: str) -> T:
        """A JetStream API request, its tries short and overlapping while this connection shows
        an election (jpu.bus.election): a request dropped by a leader that just died is not
        waited on for the whole API timeout (SPEC O3)."""
        return await ride_out_election(call, what, give_up=self._closing, watch=watch_of(self.nc))

    async def last_seq(self) -> int:
        info = await self._ride_out(lambda t: self.js.stream_info(self.stream), "stream info")
        return int(info.state.last_seq)

    async def last_message(self, subject: str) -> RawStreamMsg | None:
        """The last message on `subject` (None when there is none), riding out an election."""
        try:
            return await self._ride_out(
                lambda t: self.js.get_last_msg(self.stream, subject), "last message"
            )
        except NotFoundError:
            return None

    async def stream_bytes(self) -> int:
        """The event stream's size on each server's disk (the log is never pruned: E6)."""
        return int((await self.js.stream_info(self.stream)).state.bytes)

    async def last_subject_seq(self, subject: str) -> int:
        """Stream seq of the last message on `subject`; 0 when there is none (SPEC E2)."""
        msg = await self.last_message(subject)
        return 0 if msg is None else int(msg.seq or 0)

    # --- append -----------------------------------------------------------------------------

    def _headers(self, event: Event, extra: dict[str, str] | None) -> dict[str, str]:
        headers = dict(extra or {})
        headers[H_MSG_ID] = event.event_id  # de-duplication within the stream's window
        return inject_headers(headers)

    async def append(
        self,
        event: Event,
        *,
        expected_last_subject_seq: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> int:
        """Append one event; returns its stream sequence. SPEC E2: with an expected last subject
        sequence, a concurrent writer's append makes this one fail with ConcurrencyConflict.
        While no stream leader answers (an election after a node's loss, a server restarting)
        the same event is resent for up to ELECTION_S, then the last error is raised.

        While the connection shows no sign of an election the first try is made in the caller's
        own task (no try task, no wait on a set): concurrent appends then cost little more than
        their publish, and their publishes share the connection's flushes. A try that goes
        unanswered marks the connection suspect and the election ride starts, resending the same
        event (the same Nats-Msg-Id: stored once, SPEC E2)."""
        watch = watch_of(self.nc)
        loop = asyncio.get_running_loop()
        if not watch.suspect(loop.time()):
            try:
                return await self._append_once(event, expected_last_subject_seq, headers, TRY_S)
            except Exception as e:
                if not is_unreachable(e) or self._closing.is_set():
                    raise
                # said as the ride says it: an operator (and the outage tests) see every resend
                log.info("append: no leader answered (%r); trying again", e)
                watch.unanswered(loop.time())  # the ride begins with short, overlapping tries
        return await ride_out_election(
            lambda try_s: self._append_once(event, expected_last_subject_seq, headers, try_s),
            "append",
            give_up=self._closing,
            # The publish bounds its own wait for the ack: when the stream's leader dies its
            # answer never comes, and the append is sent again (same msg id) to the new leader
            # rather than waiting out a long timeout (SPEC O3).
            bounds_itself=True,
            watch=watch_of(self.nc),
        )

    async def _append_once(
        self,
        event: Event,
        expected_last_subject_seq: int | None,
        headers: dict[str, str] | None,
        try_s: float,
    ) -> int:
        subject = subject_for(event, self.prefix)
        hdrs = self._headers(event, headers)
        if expected_last_subject_seq is not None:
            hdrs[H_EXPECTED_LAST_SUBJECT_SEQ] = str(expected_last_subject_seq)
        try:
            ack = await self.js.publish(
                subject, encode(event), headers=hdrs, stream=self.stream, timeout=try_s
            )
        except APIError as e:
            if expected_last_subject_seq is not None and is_wrong_last_sequence(e):
                own = await self._own_last(subject, event.event_id)
                if own:
                    return own
                raise ConcurrencyConflict(
                    subject, expected_last_subject_seq, e.description or ""
                ) from e
            raise
        return int(ack.seq)

    async def append_retrying(
        self,
        event: Event,
        *,
        expected_last_subject_seq: int | None = None,
        stop: asyncio.Event | None = None,
        give_up_after_s: float | None = None,
    ) -> int:
        """`append`, retried while NATS is unreachable (a timeout as the server dies, no
        responders while JetStream restarts; jpu.bus.errors.is_unreachable), always with the
        same event and so the same Nats-Msg-Id (SPEC E2, O5). A retry of an append that
        did land is no second copy: the stream drops the repeated msg id within its duplicate
        window, and with an expected last subject sequence `append` recognises its own event as
        the subject's last. Backoff 0.2 s doubling to 5 s. Gives up (re-raises the last error)
        once `stop` is set, after `give_up_after_s`, or when the bus is closing; any other error
        (ConcurrencyConflict included) is raised at once."""
        loop = asyncio.get_running_loop()
        deadline = None if give_up_after_s is None else loop.time() + give_up_after_s
        delay, attempt = 0.2, 1
        while True:
            try:
                return await self.append(event, expected_last_subject_seq=expected_last_subject_seq)
            except Exception as e:
                if not is_unreachable(e) or self._closing.is_set():
                    raise
                if (stop is not None and stop.is_set()) or (
                    deadline is not None and loop.time() + delay > deadline
                ):
                    raise
                log.warning(
                    "append not acknowledged; retrying with the same msg id",
                    extra={"event_id": event.event_id, "attempt": attempt, "error": repr(e)},
                )
            if stop is None:
                await asyncio.sleep(delay)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
            delay, attempt = min(delay * 2, _RETRY_MAX_DELAY_S), attempt + 1

    async def _own_last(self, subject: str, event_id: str) -> int:
        """The server checks the expected sequence before de-duplication, so a retry after a lost
        ack looks like a conflict; when the subject's last message is this very event, it is not."""
        last = await self.last_message(subject)
        if last is None:
            return 0
        return int(last.seq or 0) if (last.headers or {}).get(H_MSG_ID) == event_id else 0

    async def append_many(self, events: Sequence[Event]) -> list[int]:
        """Pipelined append: publish all, then await every ack. Order per subject is kept
        (one connection, published in order); raises the first error after all settle."""
        futures = []
        for event in events:
            futures.append(
                await self.js.publish_async(
                    subject_for(event, self.prefix),
                    encode(event),
                    headers=self._headers(event, None),
                    stream=self.stream,
                )
            )
        acks = await asyncio.wait_for(
            asyncio.gather(*futures, return_exceptions=True), timeout=_ACK_TIMEOUT_S
        )
        for ack in acks:
            if isinstance(ack, BaseException):
                raise ack
        return [int(ack.seq) for ack in acks]  # type: ignore[union-attr]

    # --- read -------------------------------------------------------------------------------

    async def job_events(self, job_id: str) -> list[Delivered]:
        """Every event of one job, in order (the audit trail). A task of an array (Q7) begins
        with its own submit, derived from the array's one event on the array's subject."""
        own = [d async for d in self.replay(filter_subject=f"{self.prefix}.job.{job_id}")]
        task = split_task_id(job_id)
        if task is None or (own and isinstance(own[0].event, JobSubmitted)):
            return own
        array_id, index = task
        first = [d async for d in self.replay(filter_subject=f"{self.prefix}.job.{array_id}")]
        submit = first[0] if first else None
        if submit is None or not isinstance(submit.event, JobSubmitted):
            return own
        a = submit.event.array
        if a is None or a.array_id is not None or index not in a.tasks:
            return own
        derived = msgspec.structs.replace(submit, event=task_of(submit.event, index))
        return [derived, *own]

    async def replay(
        self,
        *,
        start_seq: int = 1,
        until_ts: float | None = None,
        filter_subject: str | None = None,
    ) -> AsyncGenerator[Delivered, None]:
        """The log from `start_seq` to its last seq at call time (SPEC E6), stopping at the first
        event with ts > until_ts. Undecodable messages are skipped (consumers park them)."""
        subject = filter_subject or f"{self.prefix}.>"
        reader = read_range(self.js, self.stream, subject, start_seq)
        async with contextlib.aclosing(reader) as msgs:
            async for msg in msgs:
                seq = msg.metadata.sequence.stream
                try:
                    event = decode(msg.data)
                except (msgspec.DecodeError, msgspec.ValidationError) as e:
                    log.warning("replay: skip undecodable seq=%d %s: %s", seq, msg.subject, e)
                    continue
                if until_ts is not None and event.ts > until_ts:
                    return
                yield Delivered(seq, msg.subject, event, dict(msg.headers or {}))

    async def parked(self, limit: int = 100) -> list[ParkedMessage]:
        return await read_parked(self.js, self.dlq_stream, self.prefix, limit)

    # --- consume ----------------------------------------------------------------------------

    async def consume(
        self,
        durable: str,
        handler: Callable[[list[Delivered]], Awaitable[None]],
        *,
        stop: asyncio.Event,
        filter_subject: str | None = None,
        batch: int = 256,
        max_deliver: int = 5,
        ack_wait_s: float = 30.0,
        retry_delay_s: float = 0.5,
    ) -> None:
        """Durable pull consumer until `stop` is set; see jpu.bus.consumer (SPEC O5)."""
        spec = ConsumerSpec(
            stream=self.stream,
            prefix=self.prefix,
            durable=durable,
            filter_subject=filter_subject or f"{self.prefix}.>",
            batch=batch,
            max_deliver=max_deliver,
            ack_wait_s=ack_wait_s,
            retry_delay_s=retry_delay_s,
        )
        await run_consumer(self.js, spec, handler, stop)

    async def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Drain: in-flight publishes and acks go out before the connection closes. Bounded
        (SPEC O5): the drain gets `timeout_s` (nats-py's own would wait 30 s for a
        dead server, then 10 s for a flush) and is skipped while the connection is down (there
        is nowhere to drain to) or the server does not answer a PING within 1 s; then the
        connection is closed, again within `timeout_s`."""
        self._closing.set()
        nc = self.nc
        if nc.is_closed:
            return
        drain: asyncio.Future[None] | None = None
        if nc.is_connected and await _answers(nc):
            drain = asyncio.ensure_future(nc.drain())
            await asyncio.wait({drain}, timeout=timeout_s)
            if not drain.done():
                log.warning("NATS drain did not finish in %.1f s; closing", timeout_s)
        if not nc.is_closed:
            closing = asyncio.ensure_future(nc.close())
            await asyncio.wait({closing}, timeout=timeout_s)
            _settle(closing, "close")
        if drain is not None:
            _settle(drain, "drain")


async def _answers(nc: NATS) -> bool:
    """A PING/PONG within 1 s: is there a server to drain to? (A frozen or dead one is not;
    a drain towards it could only time out.)"""
    try:
        await nc.flush(timeout=1)
    except Exception:
        return False
    return True


def _settle(task: asyncio.Future[None], what: str) -> None:
    """Stop a background nats-py drain/close we no longer wait for, and retrieve its outcome
    (no "exception was never retrieved"); errors while closing are only logged."""
    if not task.done():
        task.cancel()

    def retrieve(t: asyncio.Future[None]) -> None:
        if not t.cancelled() and t.exception() is not None:
            log.debug("NATS %s: %s", what, t.exception())

    task.add_done_callback(retrieve)


async def _log_error(e: Exception) -> None:
    log.warning("NATS error: %s", e)


async def _reconnected() -> None:
    log.warning("reconnected to NATS")
