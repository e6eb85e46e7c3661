"""The two adapters every service holds: the event bus and the database pool (SPEC E4).

Every step of the start — connect, ensure the stream, migrate — retries through an outage
(jpu.runtime.resilience), so a service started before NATS or PostgreSQL answers, or during a
JetStream leader election (a Kubernetes rollout, a supervisor restart), waits for them instead
of exiting (SPEC O3, O5).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import asyncpg

from jpu.bus import EventBus
from jpu.config import Config
from jpu.runtime.resilience import Unavailable, retry
from jpu.store.db import create_pool, migrate

log = logging.getLogger("jpu.runtime.edges")

# Each try of ensure_stream: a JetStream request waits 10 s for an answer, and one sent while
# there is no leader is dropped, not answered later — try again sooner (create/update is
# idempotent; a cluster answers in well under a second once it has a leader).
ENSURE_TRY_S = 3.0

# The bus or the database did not answer within the connect timeout (or the service was stopped).
EdgesUnavailable = Unavailable


@dataclass
class Edges:
    config: Config
    bus: EventBus
    pool: asyncpg.Pool

    async def close(self) -> None:
        try:
            await self.bus.close()
        finally:
            await self.pool.close()


async def connect_edges(
    config: Config,
    *,
    name: str | None = None,
    run_migrations: bool = True,
    ensure_stream: bool = True,
    timeout_s: float | None = None,
    stop: asyncio.Event | None = None,
    lazy_pool: bool = False,
) -> Edges:
    """Connect bus and pool, ensure the stream, apply migrations: each step retried through an
    outage until `stop` is set or `timeout_s` has passed (None: as long as it takes).
    `lazy_pool`: the pool connects on first use (min_size 0), so the start does not wait for
    PostgreSQL — the gateway serves what the log knows while it is away (SPEC O5)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.monotonic(), 0.0)

    async def bus_() -> EventBus:
        return await EventBus.connect(
            config.nats_url,
            stream=config.stream_name,
            prefix=config.subject_prefix,
            name=name,
            tls_files=(config.nats_tls_ca, config.nats_tls_cert, config.nats_tls_key),  # SEC2
        )

    bus = await retry("NATS", bus_, stop=stop, timeout_s=left())
    try:
        pool = await retry(
            "PostgreSQL",
            lambda: create_pool(config.database_url, min_size=0 if lazy_pool else 1),
            stop=stop,
            timeout_s=left(),
        )
    except BaseException:
        await bus.close()
        raise
    edges = Edges(config, bus, pool)
    try:
        if ensure_stream:  # stream_info/add_stream time out during an election (SPEC O3)
            await retry(
                "the event stream",
                lambda: asyncio.wait_for(bus.ensure_stream(), ENSURE_TRY_S),
                stop=stop,
                timeout_s=left(),
            )
        if run_migrations:
            await retry("migrations", lambda: migrate(pool), stop=stop, timeout_s=left())
    except BaseException:
        await edges.close()
        raise
    log.info("connected", extra={"nats": config.nats_url, "stream": config.stream_name})
    return edges
