"""The start's retry policy (jpu.runtime.resilience; SPEC O3, O5): capped exponential backoff
with jitter, an outage waited out, a configuration error raised at once."""

from __future__ import annotations

import asyncio
import socket

import asyncpg
import nats.errors
import nats.js.errors
import pytest

from jpu.runtime.resilience import (
    Backoff,
    Unavailable,
    caused_by_outage,
    is_transient,
    retry,
    run_through_outages,
    within,
)

FAST = Backoff(first_s=0.001, cap_s=0.004)


def test_O5_backoff_doubles_up_to_its_cap_with_bounded_jitter() -> None:
    b = Backoff(first_s=0.2, cap_s=5.0, jitter=0.2)
    assert [b.delay(n, 0.5) for n in range(7)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5, 5])
    assert b.delay(0, 0.0) == pytest.approx(0.16) and b.delay(0, 0.999999) == pytest.approx(0.24)
    assert b.delay(10_000, 0.5) == pytest.approx(5.0)  # no overflow after a long outage


@pytest.mark.parametrize(
    "err",
    [
        socket.gaierror(-2, "Name or service not known"),  # a stopped container's DNS name
        ConnectionRefusedError(111, "Connect call failed"),
        OSError("Multiple exceptions: [Errno 111] ..."),
        TimeoutError(),
        nats.errors.TimeoutError(),
        nats.errors.NoRespondersError(),
        nats.errors.NoServersError(),
        nats.js.errors.ServiceUnavailableError(),
        nats.js.errors.APIError(code=503, err_code=10008),  # JetStream electing a leader
        asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
        asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed"),
        asyncpg.exceptions.TooManyConnectionsError("too many clients"),
    ],
    ids=type,
)
def test_O5_an_outage_is_transient(err: BaseException) -> None:
    assert is_transient(err)


@pytest.mark.parametrize(
    "err",
    [
        asyncpg.exceptions.InvalidPasswordError("password authentication failed"),
        asyncpg.exceptions.InvalidAuthorizationSpecificationError("no pg_hba.conf entry"),
        asyncpg.exceptions.InsufficientPrivilegeError("permission denied for schema"),
        asyncpg.exceptions.InvalidCatalogNameError('database "nope" does not exist'),
        nats.errors.AuthorizationError(),
        nats.js.errors.BadRequestError(code=400, err_code=10058),  # a stream config clash
        PermissionError(13, "Permission denied"),
        ValueError("bad config"),
    ],
    ids=type,
)
def test_O5_a_configuration_error_is_not_transient(err: BaseException) -> None:
    assert not is_transient(err)


async def test_O5_retry_waits_out_an_outage_then_returns() -> None:
    calls = 0

    async def step() -> str:
        nonlocal calls
        calls += 1
        if calls < 4:
            raise nats.errors.NoRespondersError
        return "up"

    assert await retry("bus", step, backoff=FAST) == "up" and calls == 4


async def test_O5_retry_raises_a_configuration_error_at_once() -> None:
    calls = 0

    async def step() -> None:
        nonlocal calls
        calls += 1
        raise asyncpg.exceptions.InvalidPasswordError("password authentication failed")

    with pytest.raises(asyncpg.exceptions.InvalidPasswordError):
        await retry("PostgreSQL", step, backoff=FAST)
    assert calls == 1


async def test_O5_retry_gives_up_when_stopped_even_inside_a_step_that_never_returns() -> None:
    stop = asyncio.Event()

    async def hangs() -> None:  # nats-py's first connect waits for a server forever
        await asyncio.Event().wait()

    task = asyncio.create_task(retry("NATS", hangs, stop=stop))
    await asyncio.sleep(0.05)
    stop.set()
    with pytest.raises(Unavailable):
        await asyncio.wait_for(task, 2)


async def test_O5_retry_with_a_deadline_raises_unavailable() -> None:
    async def down() -> None:
        raise ConnectionRefusedError(111, "refused")

    with pytest.raises(Unavailable, match="unavailable after"):
        await retry("PostgreSQL", down, timeout_s=0.05, backoff=FAST)


async def test_O5_workers_stopped_by_an_outage_run_again_until_stop() -> None:
    stop, rounds = asyncio.Event(), 0

    async def workers(round_stop: asyncio.Event) -> None:
        nonlocal rounds
        rounds += 1
        if rounds < 3:  # PostgreSQL restarting under the workers, twice
            raise OSError("connection refused") from ConnectionRefusedError(111, "refused")
        stop.set()
        await round_stop.wait()  # the outer stop reaches the round's workers

    await asyncio.wait_for(run_through_outages("svc", workers, stop, backoff=FAST), 2)
    assert rounds == 3


async def test_O5_a_worker_bug_still_crashes_the_service() -> None:
    async def workers(_: asyncio.Event) -> None:
        raise KeyError("a bug, not an outage")

    with pytest.raises(KeyError):
        await run_through_outages("svc", workers, asyncio.Event(), backoff=FAST)


def test_O5_an_outage_is_found_behind_the_error_it_caused() -> None:
    try:
        try:
            raise asyncpg.exceptions.AdminShutdownError("terminating connection")
        except asyncpg.PostgresError as e:
            raise RuntimeError("projection failed") from e
    except RuntimeError as wrapped:
        assert caused_by_outage(wrapped)
    assert not caused_by_outage(RuntimeError("projection failed"))


async def test_O5_a_stop_whose_drain_meets_the_outage_is_still_a_stop() -> None:
    stop = asyncio.Event()

    async def workers(round_stop: asyncio.Event) -> None:
        stop.set()
        await round_stop.wait()
        raise ConnectionRefusedError(111, "refused")  # the last write, PostgreSQL still away

    await asyncio.wait_for(run_through_outages("svc", workers, stop, backoff=FAST), 2)


async def test_O5_within_gives_up_on_a_hung_call_without_waiting_for_its_cancellation() -> None:
    # what asyncpg does with a query on a frozen server: its cleanup on cancel waits too
    released = asyncio.Event()
    cleanup_done = asyncio.Event()

    async def hung_query() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await released.wait()  # the connection's reset, on a server that does not answer
            cleanup_done.set()

    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(TimeoutError, match=r"the lookup: no answer within 0\.05 s"):
        await within(hung_query(), 0.05, "the lookup")
    assert loop.time() - t0 < 1.0  # asyncio.wait_for would wait for `released` forever
    assert isinstance(TimeoutError(), OSError)  # an outage to the gateway's error handling
    released.set()
    await asyncio.wait_for(cleanup_done.wait(), 1.0)  # the cleanup still runs, later


async def test_O5_within_returns_what_answers_in_time() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return 7

    assert await within(answer(), 1.0, "x") == 7
