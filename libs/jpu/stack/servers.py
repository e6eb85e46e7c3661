"""NATS JetStream and PostgreSQL for the stack: given by URL, or embedded under the data dir."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jpu.bus import auth
from jpu.embedded.nats import EmbeddedNats
from jpu.embedded.postgres import EmbeddedPostgres
from jpu.stack import private

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
    """Where the embedded cluster lives: `<data_dir>/pg`, unless we are root: then the postgres
    user cannot enter the data dir (0700, SPEC SEC1), and the cluster has a directory of its own
    under /var/lib/jpu-share, one per checkout. A cluster an earlier run kept in `<data_dir>/pg`
    is moved there (stack.private), so its data survives."""
    data_dir = data_dir.absolute()
    if os.geteuid() != 0:
        return data_dir / "pg"
    fallback = private.site_dir_for(data_dir, "pg")
    old = data_dir / "pg"
    if (pid := _running_postmaster(old / "pgdata")) is not None:
        raise RuntimeError(f"a PostgreSQL (pid {pid}) still runs in {old}; stop it first")
    if (old / "pgdata" / "PG_VERSION").exists():  # else no cluster there to keep
        private.carry_over(old, fallback, merge=False)
    fallback.mkdir(mode=0o700, exist_ok=True)  # its server's log too: nobody else's to read
    fallback.chmod(0o700)
    log.info("PostgreSQL data outside the checkout", extra={"pg_data_dir": str(fallback)})
    return fallback


def _running_postmaster(pgdata: Path) -> int | None:
    """The pid in `postmaster.pid` when that process is alive (a cluster must not move then)."""
    try:
        pid = int((pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except (OSError, ValueError):
        return None
    return pid if comm in ("postgres", "postmaster") else None  # not a recycled pid


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
