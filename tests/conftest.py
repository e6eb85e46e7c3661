"""Shared fixtures: real servers (NATS JetStream, PostgreSQL) started per session — embedded
processes or containers (jpu.testing.servers, docs/testing.md) — unless JPU_TEST_NATS_URL /
JPU_TEST_DATABASE_URL point at running ones; a real Slurm test cluster for
the tests that ask for `slurm_cluster` (started on first use, stopped at the end)."""

import pytest

from jpu.testing.unavailable import needs_root

pytest_plugins = [
    "jpu.testing.servers",  # embedded or containers: JPU_TEST_SERVERS, JPU_TEST_CLUSTER_SERVERS
    "jpu.testing.nats_fixtures",
    "jpu.testing.pg_fixtures",
    "jpu.testing.slurm_fixtures",
    "jpu.testing.api_fixtures",  # api, server (the gateway), smtp, webhook (the receivers)
]


@pytest.fixture
def as_root() -> None:
    """Tests that create Unix accounts or run the root side of the launch chain need root. As a
    user they skip with the reason; JPU_TEST_ROOT_REQUIRED=1 (CI) makes that a failure."""
    needs_root("creates Unix accounts, runs the root side of the launch chain")
