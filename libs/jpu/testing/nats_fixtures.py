"""pytest plugin: a real JetStream server per session and an isolated EventBus per test.

List it in tests/conftest.py: `pytest_plugins = ["jpu.testing.nats_fixtures"]`.
JPU_TEST_NATS_URL points the suite at an existing server instead (e.g. in CI or a cluster).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from jpu.bus import EventBus
from jpu.embedded.nats import EmbeddedNats


@pytest.fixture(scope="session")
def nats_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("JPU_TEST_NATS_URL")
    if url:
        yield url
        return
    server = EmbeddedNats(tmp_path_factory.mktemp("nats"))
    try:
        yield server.start()
    finally:
        server.stop()


def unique_names() -> tuple[str, str]:
    """A stream name and subject prefix no other test uses (T<hex>, t<hex>)."""
    tag = uuid.uuid4().hex[:12]
    return f"T{tag}", f"t{tag}"


@pytest_asyncio.fixture
async def bus(nats_url: str) -> AsyncIterator[EventBus]:
    stream, prefix = unique_names()
    b = await EventBus.connect(nats_url, stream=stream, prefix=prefix, name="pytest")
    try:
        await b.ensure_stream()
        yield b
    finally:
        await b.delete_stream()
        await b.close()
