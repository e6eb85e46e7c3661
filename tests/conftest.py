"""Shared fixtures: real servers (NATS JetStream, PostgreSQL) started per session unless
JPU_TEST_NATS_URL / JPU_TEST_DATABASE_URL point at running ones; a real Slurm test cluster for
the tests that ask for `slurm_cluster` (started on first use, stopped at the end)."""

pytest_plugins = [
    "jpu.testing.nats_fixtures",
    "jpu.testing.pg_fixtures",
    "jpu.testing.slurm_fixtures",
]
