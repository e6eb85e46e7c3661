"""Forwarding commands to intake over NATS request/reply (SPEC E4), and read-your-writes.

The gateway authenticates and shape-checks; intake decides (Q1–Q3, Q6, cancel rules) and answers
with a `CommandReply` carrying the stream sequence of the event it appended. A submit is answered
from intake's reply (its fold's view of the job); the user's next read through this gateway waits
until the jobs projection has applied that sequence (`wrote`, `own_writes`), so it shows the
submit's effect. Other commands wait before answering (`read_back`), so the body they return (and
any GET right after) already shows it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

import nats.errors
from fastapi import Request
from starlette.requests import ClientDisconnect

from jpu import commands
from jpu.bus.errors import ConcurrencyConflict
from jpu.domain import limits
from jpu.events import subject_for
from jpu.runtime.edges import Edges
from jpu.runtime.resilience import within
from jpu.store.positions import PositionWatch
from jpu.store.projection import wait_applied
from jpu_services.gateway.deps import DATABASE_AWAY
from jpu_services.gateway.errors import ApiError, unreachable_dependency

T = TypeVar("T")

log = logging.getLogger("jpu.gateway.commands")

# Intake answers in milliseconds, but its append rides out a NATS leader election (up to
# EventBus ELECTION_S, SPEC O3): waiting that long answers the command instead of a 503 the
# client would have to retry.
COMMAND_TIMEOUT_S: Final = 14.0
READ_YOUR_WRITES_TIMEOUT_S: Final = 5.0
NO_RESPONDERS_RETRY_S: Final = 3.0  # an intake reconnecting to another NATS node
_NO_RESPONDERS_PAUSE_S: Final = 0.2
MAX_BODY_BYTES: Final = limits.MAX_BODY_BYTES
MAX_WRITERS: Final = 10_000  # users whose last write one process remembers (oldest forgotten)


def now(request: Request) -> float:
    """The gateway's clock (SPEC E1: injectable; tests may put a FakeClock on app.state)."""
    clock = getattr(request.app.state, "clock", None)
    return float(clock.now()) if clock is not None else time.time()


async def send(
    edges: Edges, subject: str, cmd: commands.Command, timeout_s: float = COMMAND_TIMEOUT_S
) -> commands.CommandReply:
    """Request/reply to intake; no intake or no answer → 503 INTAKE_UNAVAILABLE.

    "No responders" means no intake received the command, so it is sent again for up to
    NO_RESPONDERS_RETRY_S: an intake whose NATS node was lost resubscribes through another
    node within a second (SPEC O3). A timeout is not resent (intake may have acted on it)."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + NO_RESPONDERS_RETRY_S
    while True:
        try:
            msg = await edges.bus.nc.request(subject, commands.encode(cmd), timeout=timeout_s)
            break
        except nats.errors.NoRespondersError as e:
            if loop.time() + _NO_RESPONDERS_PAUSE_S > give_up:
                raise _unavailable("no intake service is running") from e
            await asyncio.sleep(_NO_RESPONDERS_PAUSE_S)
        except (nats.errors.TimeoutError, TimeoutError) as e:
            raise _unavailable(f"intake did not answer within {timeout_s:g} s") from e
    reply = commands.decode_reply(msg.data)
    if reply.error is not None:
        err = reply.error
        raise ApiError(reply.status, err.code, err.message, dict(err.details))
    return reply


async def append(
    edges: Edges, event: commands.GatewayEvent, expected_last_subject_seq: int | None = None
) -> int:
    """Have intake append `event` (SPEC SEC2: the gateway's NATS identity publishes commands,
    never events); its stream sequence. ConcurrencyConflict as `EventBus.append` raises it."""
    command = commands.AppendCommand(
        event=event, expected_last_subject_seq=expected_last_subject_seq
    )
    try:
        reply = await send(edges, commands.append_subject(edges.bus.prefix), command)
    except ApiError as e:
        if e.code != "CONFLICT" or expected_last_subject_seq is None:
            raise
        subject = subject_for(event, edges.bus.prefix)
        raise ConcurrencyConflict(subject, expected_last_subject_seq, e.message) from e
    assert reply.seq is not None
    return reply.seq


def _unavailable(message: str) -> ApiError:
    return ApiError(
        503, "INTAKE_UNAVAILABLE", message + "; try again shortly", headers={"Retry-After": "2"}
    )


async def caught_up(
    edges: Edges, seq: int | None, projection: str = "jobs", request: Request | None = None
) -> bool:
    """Read-your-writes: True once `projection` applied `seq`; False (logged) on timeout.
    Woken by the projection's NOTIFY when the app has a PositionWatch, else polls."""
    if not seq:
        return True
    watch: PositionWatch | None = (
        getattr(request.app.state, "positions", None) if request is not None else None
    )
    try:
        if watch is not None:
            await watch.wait(edges.pool, projection, seq, timeout=READ_YOUR_WRITES_TIMEOUT_S)
        else:
            await wait_applied(edges.pool, projection, seq, timeout=READ_YOUR_WRITES_TIMEOUT_S)
    except TimeoutError:
        log.warning("projection lag", extra={"projection": projection, "seq": seq})
        return False
    return True


def _writes(request: Request) -> OrderedDict[str, int]:
    state = request.app.state
    if getattr(state, "own_writes", None) is None:
        state.own_writes = OrderedDict()
    written: OrderedDict[str, int] = state.own_writes
    return written


def wrote(request: Request, user: str, seq: int) -> None:
    """`user` wrote `seq` through this process, answered before the projection applied it: the
    user's next read here waits for it (`own_writes`)."""
    written = _writes(request)
    written[user] = max(seq, written.pop(user, 0))
    while len(written) > MAX_WRITERS:
        written.popitem(last=False)


async def own_writes(request: Request, edges: Edges, user: str) -> None:
    """Read-your-writes: wait until the jobs projection applied `user`'s last write through this
    process (at most READ_YOUR_WRITES_TIMEOUT_S; then the read answers what it has)."""
    written = _writes(request)
    seq = written.get(user)
    if seq is None:
        return
    try:
        done = await caught_up(edges, seq, request=request)
    except Exception as e:
        if unreachable_dependency(e) is None:
            raise
        return  # the database does not answer: the read itself will say so
    if done and written.get(user) == seq:
        del written[user]


async def read_back(
    edges: Edges, seq: int | None, request: Request, load: Callable[[], Awaitable[T]]
) -> T | None:
    """After an accepted command: wait for the projection (read-your-writes), then `load` the
    row. None when the projection lags or the database does not answer right now: the command
    is in the log all the same, so the client must learn it was accepted — never a 503 that
    invites a second submit."""

    async def wait_and_load() -> T | None:
        if not await caught_up(edges, seq, request=request):
            return None
        return await load()

    if request.scope.get(DATABASE_AWAY):  # found away by this very request (its token)
        return None
    try:  # bounded as a whole: a database that hangs rather than refuses (SPEC O5)
        return await within(wait_and_load(), READ_YOUR_WRITES_TIMEOUT_S + 1.0, "read-your-writes")
    except Exception as e:
        if unreachable_dependency(e) is None:
            raise
        log.warning("read-your-writes skipped: database unavailable", extra={"error": repr(e)})
        return None


async def read_body(request: Request, limit: int) -> bytes | None:
    """The request body, or None when it is over `limit` bytes. Streamed: a 100 MB body is
    read to its end (so the client gets the answer) but never held in memory. A body that does
    not arrive in time is the server's to cut (jpu_services.gateway.server)."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size <= limit:
                chunks.append(chunk)
    except ClientDisconnect as e:  # gone, or cut by the server's body timeout
        raise ApiError(400, "BAD_REQUEST", "the client went away before sending the body") from e
    return b"".join(chunks) if size <= limit else None


def shape_error(field: str, message: str, **details: Any) -> ApiError:
    """422 VALIDATION_ERROR naming `field` (details.field, and the message's first word)."""
    text = message if message.startswith(field) else f"{field}: {message}"
    return ApiError(422, "VALIDATION_ERROR", text, {"field": field, **details})
