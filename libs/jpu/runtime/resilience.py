"""The one retry policy of a service's start (SPEC O3, O5): a step that meets a bus or database
that is briefly away — a JetStream leader election, NATS or PostgreSQL restarting, a container's
DNS name not yet (or no longer) resolvable — is tried again with capped exponential backoff and
jitter, each retry logged, until it answers or the service is stopped. A service that cannot
start waits; it never exits for good on an outage. A configuration error (bad credentials, no
permission, a database that does not exist, a bad stream configuration) is not an outage: it is
raised at once, so the process fails clearly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import nats.errors

from jpu.bus.errors import is_unreachable
from jpu.runtime.backoff import Backoff

log = logging.getLogger("jpu.runtime.resilience")
T = TypeVar("T")


class Unavailable(RuntimeError):
    """A step did not succeed before its deadline, or the service was stopped while waiting."""


DEFAULT_BACKOFF = Backoff()

# PostgreSQL errors that mean "not now" rather than "never": the server starting up or shutting
# down (57P0x), too many connections (53300), a connection lost (class 08).
_PG_TRANSIENT: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.TooManyConnectionsError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
)


def is_transient(err: BaseException) -> bool:
    """True for an outage worth waiting out; False for a verdict (credentials, permissions,
    configuration) that no retry changes."""
    if isinstance(err, nats.errors.AuthorizationError | PermissionError):
        return False  # bad NATS credentials / a file we may not read
    if is_unreachable(err):  # NATS timeouts, no responders, an election (jpu.bus.errors)
        return True
    if isinstance(err, _PG_TRANSIENT):
        return True
    if isinstance(err, asyncpg.PostgresError | asyncpg.InterfaceError):
        return False  # bad password, no such database, permission denied, bad SQL
    # Connection refused/reset, DNS (socket.gaierror: a stopped container's name is gone),
    # host unreachable, asyncio's "Multiple exceptions" OSError for several addresses.
    if isinstance(err, OSError | TimeoutError):
        return True
    # nats-py's own connection errors (no servers, connection closed while connecting)
    return isinstance(err, nats.errors.NoServersError | nats.errors.ConnectionClosedError)


async def retry(
    what: str,
    step: Callable[[], Awaitable[T]],
    *,
    stop: asyncio.Event | None = None,
    timeout_s: float | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    transient: Callable[[BaseException], bool] = is_transient,
) -> T:
    """`await step()` until it succeeds; a transient error is logged and retried after
    `backoff`, anything else raised at once. Raises Unavailable once `stop` is set or after
    `timeout_s` (None: no deadline — a service waits for its edges as long as it runs)."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    attempt = 0
    while True:
        try:
            return await _unless_stopped(what, step, stop)
        except Unavailable:
            raise
        except Exception as e:
            if not transient(e):
                raise
            error: Exception = e
        delay = backoff.delay(attempt, random.random())
        if stop is not None and stop.is_set():
            raise Unavailable(f"{what}: stopped while unavailable ({error!r})") from error
        if deadline is not None and loop.time() + delay > deadline:
            raise Unavailable(f"{what} unavailable after {timeout_s} s: {error!r}") from error
        attempt += 1
        log.warning(
            "%s unavailable; retrying",
            what,
            extra={"step": what, "attempt": attempt, "error": repr(error), "retry_in_s": delay},
        )
        if stop is None:
            await asyncio.sleep(delay)
        else:
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
            else:
                raise Unavailable(f"{what}: stopped while unavailable ({error!r})") from error


async def _unless_stopped(
    what: str, step: Callable[[], Awaitable[T]], stop: asyncio.Event | None
) -> T:
    """The step, cancelled when `stop` is set: nats-py's first connect waits for a server
    as long as it takes, and a SIGTERM must still stop the service meanwhile."""
    if stop is None:
        return await step()
    if stop.is_set():
        raise Unavailable(f"{what}: stopped before it answered")

    async def run() -> T:
        return await step()

    task = asyncio.create_task(run())
    stopped = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait([task, stopped], return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise Unavailable(f"{what}: stopped before it answered")


def caused_by_outage(err: BaseException) -> bool:
    """`err`, or what it was raised from, is transient: a worker that failed because the bus or
    the database went away (a query cut by PostgreSQL's shutdown, a fetch during an election)."""
    seen: set[int] = set()
    cur: BaseException | None = err
    while cur is not None and id(cur) not in seen:
        if is_transient(cur):
            return True
        seen.add(id(cur))
        cur = cur.__cause__
    return False


RESET_AFTER_S = 60.0  # a round that ran this long was a success: the next outage starts over


async def run_through_outages(
    what: str,
    run: Callable[[asyncio.Event], Awaitable[None]],
    stop: asyncio.Event,
    *,
    backoff: Backoff = DEFAULT_BACKOFF,
) -> None:
    """`run(round_stop)` — a service's workers — until `stop`; when it fails because of an
    outage (caused_by_outage), it is run again after a backoff on the same edges (the bus and
    the pool reconnect by themselves), so the service stays up through a restart of NATS or
    PostgreSQL instead of exiting. Each round starts from the log and the database, as a new
    process would (SPEC O5). Any other failure is raised: a bug still crashes the process."""
    loop = asyncio.get_running_loop()
    attempt = 0
    while True:
        round_stop = asyncio.Event()
        relay = asyncio.create_task(_relay(stop, round_stop))
        started = loop.time()
        try:
            await run(round_stop)
            return
        except Exception as e:
            if not caused_by_outage(e):
                raise
            if stop.is_set():  # asked to stop, and the drain met the outage: the next start
                log.warning(  # resumes from the log and the database (SPEC O5)
                    "%s stopped during an outage", what, extra={"error": repr(e)}
                )
                return
            error: Exception = e
        finally:
            relay.cancel()
        if loop.time() - started >= RESET_AFTER_S:
            attempt = 0
        delay = backoff.delay(attempt, random.random())
        attempt += 1
        log.warning(
            "%s stopped by an outage; running again",
            what,
            extra={"step": what, "attempt": attempt, "error": repr(error), "retry_in_s": delay},
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        if stop.is_set():
            return


async def _relay(outer: asyncio.Event, inner: asyncio.Event) -> None:
    await outer.wait()
    inner.set()


async def within(aw: Awaitable[T], timeout_s: float, what: str) -> T:
    """`await aw`, or TimeoutError (an OSError: an outage to the callers) after `timeout_s`.
    Unlike asyncio.wait_for, the late awaitable is cancelled but not waited for: cancelling
    a query on a server that hangs (a partition, a frozen host) waits on that server too —
    asyncpg's release resets the connection — and the caller must not."""
    task = asyncio.ensure_future(aw)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if task in done:
        return task.result()
    task.add_done_callback(_retrieved)
    task.cancel()
    raise TimeoutError(f"{what}: no answer within {timeout_s:g} s")


def _retrieved(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()  # retrieved: no "exception was never retrieved" when it ends
