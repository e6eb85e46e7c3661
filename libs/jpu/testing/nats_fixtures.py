"""pytest plugin: a real JetStream server per session and an isolated EventBus per test.

List it in tests/conftest.py with the servers plugin: `pytest_plugins = ["jpu.testing.servers",
"jpu.testing.nats_fixtures"]`. The servers are embedded processes or containers as
JPU_TEST_SERVERS chooses (jpu.testing.servers); JPU_TEST_NATS_URL points the suite at an existing
server instead (e.g. in CI or a cluster).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.bus import EventBus
from jpu.embedded.base import free_port
from jpu.embedded.nats import EmbeddedNats
from jpu.testing.servers import NatsServers, ServerProvider


@pytest.fixture(scope="session")
def nats_url(
    tmp_path_factory: pytest.TempPathFactory, server_provider: ServerProvider
) -> Iterator[str]:
    url = os.environ.get("JPU_TEST_NATS_URL")
    if url:
        yield url
        return
    server = server_provider.nats(tmp_path_factory.mktemp("nats"))
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


@pytest.fixture
def nats_cluster(tmp_path: Path, server_provider: ServerProvider) -> Iterator[NatsServers]:
    """A fresh 3-node JetStream cluster per test (tests kill its nodes); see
    jpu.testing.nats_cluster. `await wait_jetstream(cluster.urls)` before creating streams."""
    cluster = server_provider.nats(tmp_path / "nats-cluster", size=3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def own_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A nats-server of the test's own (one it may stop, or whose account-wide buckets it may
    fill), started on a free port under tmp_path."""
    server = EmbeddedNats(tmp_path / "nats", port=free_port())
    server.start()
    try:
        yield server
    finally:
        server.stop()
