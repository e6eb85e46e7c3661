"""The test servers' two paths give the same thing (SPEC O2, O3; jpu.testing.servers): embedded
processes and testcontainers-started containers each give a JetStream that keeps a 3-replica
stream through the SIGKILL of its leader's node, a single-node JetStream, and a PostgreSQL the
migrations apply to and that comes back with them after an immediate stop.

The containers case needs a container engine (podman, scripts/install-podman). Without one it
skips with the reason, unless JPU_TEST_CLUSTER_SERVERS=containers (CI): then it fails.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpu.bus import EventBus
from jpu.store import create_database, create_pool, migrate
from jpu.testing.nats_cluster import stream_leader, wait_jetstream
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.sample_events import promoted, submitted
from jpu.testing.servers import Backend, ServerProvider, engine_available
from jpu.testing.unavailable import skip_or_fail

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(params=["embedded", "containers"], scope="module")
def provider(request: pytest.FixtureRequest) -> Iterator[ServerProvider]:
    backend: Backend = request.param
    if backend == "containers" and not engine_available():
        insisted = os.environ.get("JPU_TEST_CLUSTER_SERVERS") == "containers"
        skip_or_fail(
            "no container engine answers (podman: scripts/install-podman)",
            "JPU_TEST_CLUSTER_SERVERS=containers" if insisted else None,
        )
    p = ServerProvider(backend)
    try:
        yield p
    finally:
        p.close()


async def test_O3_three_nodes_keep_an_R3_stream_through_the_leaders_sigkill(
    provider: ServerProvider, tmp_path: Path
) -> None:
    cluster = provider.nats(tmp_path / "nats", size=3)
    try:
        await wait_jetstream(cluster.start())
        stream, prefix = unique_names()
        bus = await EventBus.connect(cluster.urls, stream=stream, prefix=prefix, replicas=3)
        try:
            await bus.ensure_stream()
            await bus.append(submitted("j1"), expected_last_subject_seq=0)
            info = await bus.js.stream_info(stream)
            assert info.config.num_replicas == 3
            assert info.cluster is not None and len(info.cluster.replicas or []) == 2
            leader = await stream_leader(bus.js, stream)
            cluster.kill(leader)
            seq = await bus.append(promoted("j1"))  # the new leader takes it
            assert seq == 2 and await stream_leader(bus.js, stream) != leader
            cluster.node(leader).start()  # back on its store
            assert (await bus.js.stream_info(stream)).state.messages == 2
        finally:
            await bus.close()
    finally:
        cluster.stop()


async def test_O2_one_node_is_a_jetstream(provider: ServerProvider, tmp_path: Path) -> None:
    server = provider.nats(tmp_path / "nats")
    try:
        stream, prefix = unique_names()
        bus = await EventBus.connect(server.start(), stream=stream, prefix=prefix)
        try:
            await bus.ensure_stream()
            assert await bus.append(submitted("j1"), expected_last_subject_seq=0) == 1
        finally:
            await bus.close()
    finally:
        server.stop()


async def test_O2_postgres_takes_the_migrations_and_keeps_them_over_an_immediate_stop(
    provider: ServerProvider,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="jpu-test-servers-"))
    root.chmod(0o755)  # as root, the embedded postgres runs as `postgres`
    pg = provider.postgres(root / "pg")
    try:
        pg.start()
        dsn = await create_database(pg.admin_dsn(), "migrated")
        pool = await create_pool(dsn)
        try:
            applied = await migrate(pool)
            assert applied, "no migration applied on a fresh database"
        finally:
            await pool.close()
        pg.stop_immediate()
        pg.stop()  # wait until it is down (the handle's stop is idempotent)
        pg.start()
        pool = await create_pool(dsn)
        try:
            assert await migrate(pool) == []  # every migration still recorded
        finally:
            await pool.close()
    finally:
        pg.stop()
