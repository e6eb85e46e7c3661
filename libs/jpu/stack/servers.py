"""NATS JetStream and PostgreSQL for the stack: given by URL, or embedded under the data dir."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jpu.embedded.nats import EmbeddedNats
from jpu.embedded.postgres import EmbeddedPostgres

log = logging.getLogger("jpu.stack")


@dataclass
class Servers:
    nats_url: str
    database_url: str
    nats: EmbeddedNats | None = None  # None: an external server we must not stop
    postgres: EmbeddedPostgres | None = None

    def stop(self) -> None:
        """PostgreSQL, then NATS (the services are already gone). Safe to call twice."""
        if self.postgres is not None:
            log.info("stopping embedded PostgreSQL")
            self.postgres.stop()
        if self.nats is not None:
            log.info("stopping embedded NATS")
            self.nats.stop()


def _port(env: Mapping[str, str], key: str) -> int:
    value = env.get(key, "").strip()
    return int(value) if value else 0


def start_servers(data_dir: Path, env: Mapping[str, str]) -> Servers:
    """JPU_NATS_URL / JPU_DATABASE_URL when set; else embedded servers, persisted in data_dir.

    Embedded ports: JPU_NATS_PORT / JPU_PG_PORT, or free ones.
    """
    servers = Servers(
        nats_url=env.get("JPU_NATS_URL", ""), database_url=env.get("JPU_DATABASE_URL", "")
    )
    try:
        if not servers.nats_url:
            servers.nats = EmbeddedNats(data_dir / "nats", port=_port(env, "JPU_NATS_PORT"))
            servers.nats_url = servers.nats.start()
            log.info("embedded NATS JetStream started", extra={"url": servers.nats_url})
        if not servers.database_url:
            servers.postgres = EmbeddedPostgres(data_dir / "pg", port=_port(env, "JPU_PG_PORT"))
            servers.database_url = servers.postgres.start()
            log.info("embedded PostgreSQL started", extra={"dsn": servers.database_url})
    except BaseException:
        servers.stop()
        raise
    return servers
