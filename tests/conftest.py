"""Shared fixtures: real servers (NATS JetStream, PostgreSQL) started per session unless
JPU_TEST_NATS_URL / JPU_TEST_DATABASE_URL point at running ones."""

pytest_plugins = ["jpu.testing.nats_fixtures", "jpu.testing.pg_fixtures"]
