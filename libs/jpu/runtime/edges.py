"""The two adapters every service holds: the event bus and the database pool (SPEC E4).

Connecting retries with backoff, so a service started before NATS or PostgreSQL answers (a
Kubernetes rollout, a supervisor restart) waits for them instead of crash-looping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import asyncpg

from jpu.bus import EventBus
from jpu.config import Config
from jpu.store.db import create_pool, migrate

log = logging.getLogger("jpu.runtime.edges")
T = TypeVar("T")


class EdgesUnavailable(RuntimeError):
    """The bus or the database did not answer within the connect timeout."""


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


async def _retry(
    what: str, connect: Callable[[], Awaitable[T]], deadline: float, stop: asyncio.Event | None
) -> T:
    delay = 0.2
    while True:
        try:
            return await connect()
        except (TimeoutError, OSError, asyncpg.PostgresError, ConnectionError) as e:
            error: Exception = e
        except Exception as e:  # nats raises its own error types on refused connections
            if type(e).__module__.split(".")[0] != "nats":
                raise
            error = e
        if time.monotonic() + delay > deadline or (stop is not None and stop.is_set()):
            raise EdgesUnavailable(f"{what} unreachable: {error}") from error
        log.warning("waiting for %s", what, extra={"error": str(error), "retry_in_s": delay})
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


async def connect_edges(
    config: Config,
    *,
    name: str | None = None,
    run_migrations: bool = True,
    ensure_stream: bool = True,
    timeout_s: float = 60.0,
    stop: asyncio.Event | None = None,
) -> Edges:
    """Connect bus and pool (retrying until `timeout_s`), ensure the stream, apply migrations."""
    deadline = time.monotonic() + timeout_s

    async def bus_() -> EventBus:
        return await EventBus.connect(
            config.nats_url,
            stream=config.stream_name,
            prefix=config.subject_prefix,
            name=name,
            tls_files=(config.nats_tls_ca, config.nats_tls_cert, config.nats_tls_key),  # SEC2
        )

    bus = await _retry("NATS", bus_, deadline, stop)
    try:
        pool = await _retry("PostgreSQL", lambda: create_pool(config.database_url), deadline, stop)
    except BaseException:
        await bus.close()
        raise
    edges = Edges(config, bus, pool)
    try:
        if ensure_stream:
            await bus.ensure_stream()
        if run_migrations:
            await migrate(pool)
    except BaseException:
        await edges.close()
        raise
    log.info("connected", extra={"nats": config.nats_url, "stream": config.stream_name})
    return edges
