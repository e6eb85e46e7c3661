"""End-to-end fixtures: one running stack per test module (real processes, real servers).

A module may set `STACK_CONFIG = {...}` (a configuration file's content, SPEC O1) and
`STACK_ENV = {...}` (extra `JPU_<KEY>` overrides) for its stack. Every test leaves the cluster
idle (the autouse `settled` fixture cancels what is left), so tests of a module share the stack.
JPU_E2E_KEEP=1 keeps each stack's data dir (service logs, job outputs) for debugging.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from jpu.bus import EventBus
from jpu.store import create_database, drop_database
from jpu.testing.e2e_stack import Stack
from jpu.testing.nats_fixtures import unique_names

BASE_ENV = {
    "JPU_CYCLE_S": "0.5",  # D3/D8: short upper bound; triggered cycles do most of the work
    "JPU_CANCEL_GRACE_S": "2",  # X5
    "JPU_ESTIMATE_EVERY_S": "1",  # U4: estimates within a second of a change
    "JPU_SUBMIT_RATE_PER_S": "0",  # tests submit in bursts; the limiter has its own tests
}


@pytest_asyncio.fixture(scope="module")
async def stack(
    request: pytest.FixtureRequest, nats_url: str, pg_server_dsn: str
) -> AsyncIterator[Stack]:
    database = f"e2e_{uuid.uuid4().hex[:12]}"
    dsn = await create_database(pg_server_dsn, database)
    stream, prefix = unique_names()
    env = {
        **BASE_ENV,
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
        **getattr(request.module, "STACK_ENV", {}),
    }
    s = Stack(env, getattr(request.module, "STACK_CONFIG", None))
    try:
        s.wait_ready()
        yield s
    finally:
        rc = s.stop()
        bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix, name="e2e-cleanup")
        try:
            await bus.delete_stream()
        finally:
            await bus.close()
        await drop_database(pg_server_dsn, database)
        if os.environ.get("JPU_E2E_KEEP"):  # debugging: keep logs and outputs
            print(f"e2e data dir kept: {s.data_dir}")
        else:
            s.remove()
    assert rc == 0, f"stack exited {rc}"


@pytest.fixture(autouse=True)
def settled(stack: Stack) -> Iterator[None]:
    """After each test: no job left active, so the next test finds an idle cluster."""
    yield
    stack.settle()
