"""NATS JetStream and PostgreSQL for the stack: given by URL, or embedded under the data dir."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jpu.bus import auth
from jpu.embedded.nats import EmbeddedNats
from jpu.embedded.postgres import EmbeddedPostgres

log = logging.getLogger("jpu.stack")


@dataclass
class Servers:
    nats_url: str
    database_url: str
    nats: EmbeddedNats | None = None  # None: an external server we must not stop
    postgres: EmbeddedPostgres | None = None
    nats_secrets: Path | None = None  # the embedded NATS's passwords (SPEC SEC2); None: external

    def nats_env(self, user: str) -> dict[str, str]:
        """A process's identity on the embedded NATS; nothing for an external server."""
        return {} if self.nats_secrets is None else auth.identity_env(user, self.nats_secrets)

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


def postgres_data_dir(data_dir: Path) -> Path:
    """Where the embedded cluster lives: `<data_dir>/pg`, unless we are root and the postgres
    user cannot reach it (a checkout under /root, mode 0700): then a directory of its own under
    /var/lib/jpu-share, one per checkout, so `make run` works from any folder."""
    data_dir = data_dir.absolute()
    reachable = all(os.stat(p).st_mode & 0o001 for p in data_dir.parents if p.exists())
    if os.geteuid() != 0 or reachable:
        return data_dir / "pg"
    digest = hashlib.sha1(str(data_dir).encode()).hexdigest()[:10]
    fallback = Path("/var/lib/jpu-share") / f"pg-{digest}"
    fallback.parent.mkdir(parents=True, exist_ok=True)
    fallback.parent.chmod(0o755)
    log.info("PostgreSQL data outside the checkout", extra={"pg_data_dir": str(fallback)})
    return fallback


def start_servers(
    data_dir: Path, env: Mapping[str, str], stream: str = "JPU", prefix: str = "jpu"
) -> Servers:
    """JPU_NATS_URL / JPU_DATABASE_URL when set; else embedded servers, persisted in data_dir.

    Embedded ports: JPU_NATS_PORT / JPU_PG_PORT, or free ones. The embedded NATS requires an
    identity per service (SPEC SEC2): passwords generated at first start into
    `<data_dir>/secrets/nats.json` (0600), permissions from jpu.bus.permissions.
    """
    servers = Servers(
        nats_url=env.get("JPU_NATS_URL", ""), database_url=env.get("JPU_DATABASE_URL", "")
    )
    try:
        if not servers.nats_url:
            secrets = auth.secrets_path(data_dir)
            conf = auth.write_server_config(
                secrets.with_name("nats-server.conf"), auth.ensure_secrets(secrets), stream, prefix
            )
            servers.nats = EmbeddedNats(
                data_dir / "nats", port=_port(env, "JPU_NATS_PORT"), extra_args=["-c", str(conf)]
            )
            servers.nats_secrets = secrets
            servers.nats_url = servers.nats.start()
            log.info("embedded NATS JetStream started", extra={"url": servers.nats_url})
        if not servers.database_url:
            pg_dir = postgres_data_dir(data_dir)
            servers.postgres = EmbeddedPostgres(pg_dir, port=_port(env, "JPU_PG_PORT"))
            servers.database_url = servers.postgres.start()
            log.info("embedded PostgreSQL started", extra={"dsn": servers.database_url})
    except BaseException:
        servers.stop()
        raise
    return servers
