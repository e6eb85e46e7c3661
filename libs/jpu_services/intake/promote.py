"""Intake's promotion edge (SPEC Q5, S1): what to promote is decided in jpu.domain.promotion;
each `JobPromoted` is appended here with the job subject's expected sequence, so replicas racing
on the same job promote it once.

Per-user limit: the `users` table (migration 0100_auth.sql) when it has a value, else the config
(`labs[].users[].max_active_jobs`), else the global default `max_active_jobs`.
"""

from __future__ import annotations

import asyncio
import logging
import time

import asyncpg

from jpu.bus import ConcurrencyConflict, EventBus
from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.domain.promotion import configured_limits, never_satisfied, promoted, to_promote
from jpu.domain.submission import never_satisfied_end
from jpu.events import new_event_id
from jpu.runtime.resilience import within

log = logging.getLogger(__name__)
QUERY_TIMEOUT_S = 2.0  # the per-user limits refresh; on timeout the last ones stay


class Limits:
    def __init__(self, config: Config, pool: asyncpg.Pool | None, refresh_s: float = 5.0) -> None:
        self.default = config.max_active_jobs
        self.configured = configured_limits(config)
        self.pool, self.refresh_s = pool, refresh_s
        self.table: dict[str, int] = {}
        self._loaded_at = float("-inf")

    async def refresh(self) -> None:
        if self.pool is None or time.monotonic() - self._loaded_at < self.refresh_s:
            return
        self._loaded_at = time.monotonic()
        try:
            rows = await within(  # a hung database must not hold up commands
                self.pool.fetch(
                    "SELECT name, max_active_jobs FROM users WHERE max_active_jobs IS NOT NULL"
                ),
                QUERY_TIMEOUT_S,
                "the per-user limits",
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as e:  # away: kept
            log.debug("users table not readable: %s", e)
            return
        self.table = {r["name"]: int(r["max_active_jobs"]) for r in rows}

    def mapping(self) -> dict[str, int]:
        return {**self.configured, **self.table}


class Promoter:
    def __init__(self, bus: EventBus, state: ClusterState, limits: Limits) -> None:
        self.bus, self.state, self.limits = bus, state, limits
        self.max_seq = 0
        self.promoted = 0

    async def promote(self, users: set[str] | None, now: float) -> list[str]:
        """Promote what Q5 allows for `users` (None: everyone); returns the promoted job ids."""
        await self.limits.refresh()
        await self.end_never_satisfied(users, now)
        chosen = to_promote(self.state, users, self.limits.mapping(), self.limits.default)
        # Different job subjects: the appends are independent, so their acks are awaited together.
        seqs = await asyncio.gather(*(self._promote_one(jid, now) for jid in chosen))
        done = [jid for jid, seq in zip(chosen, seqs, strict=True) if seq is not None]
        self.max_seq = max([self.max_seq, *(s for s in seqs if s is not None)])
        self.promoted += len(done)
        return done

    async def end_never_satisfied(self, users: set[str] | None, now: float) -> None:
        """Q8: end CANCELLED the jobs whose dependency can never be met. The fold decides
        (replayed from the log); the expected sequence makes a restarted or second intake
        append the end once."""
        doomed = never_satisfied(self.state, users)
        seqs = await asyncio.gather(*(self._end_one(jid, now) for jid in doomed))
        self.max_seq = max([self.max_seq, *(s for s in seqs if s is not None)])

    async def _end_one(self, jid: str, now: float) -> int | None:
        job = self.state.jobs.get(jid)
        if job is None:
            return None
        event = never_satisfied_end(job, now, new_event_id())
        try:
            return await self.bus.append(event, expected_last_subject_seq=job.last_seq)
        except ConcurrencyConflict:
            return None  # ended or moved meanwhile: decided again on the new state

    async def _promote_one(self, jid: str, now: float) -> int | None:
        job = self.state.jobs.get(jid)
        if job is None:
            return None  # it ended meanwhile (cancelled): nothing to promote
        event = promoted(jid, now, new_event_id())
        try:
            return await self.bus.append(event, expected_last_subject_seq=job.last_seq)
        except ConcurrencyConflict:
            return None  # another replica promoted it (or it was cancelled): decided again later
