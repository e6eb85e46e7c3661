"""Read-your-writes without polling: wait for a projection's position through LISTEN/NOTIFY.

Every projection commit notifies `NOTIFY_CHANNEL` with `<projection>:<last_seq>` in the same
transaction (SPEC E3, `projection._save_positions`), so the notification arrives exactly when the
new position is visible. One dedicated connection listens per process; each waiter is a future
resolved by the first notification at or past its sequence. The database is asked when a wait
starts for a projection not heard of yet (a position reached before we listened), then every
`recheck_s` as a safety net, so a wait never depends on a notification alone; with the listener
connection lost, waits fall back to polling (`projection.wait_applied`).

    watch = await PositionWatch.start(dsn)
    await watch.wait(pool, "jobs", seq, timeout=5.0)   # TimeoutError if not applied in time
    await watch.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import asyncpg

from jpu.store.projection import NOTIFY_CHANNEL, last_applied, wait_applied

log = logging.getLogger(__name__)


class PositionWatch:
    def __init__(self, conn: asyncpg.Connection, recheck_s: float) -> None:
        self._conn, self.recheck_s = conn, recheck_s
        self.known: dict[str, int] = {}  # projection -> highest position seen
        self._waiters: dict[str, list[tuple[int, asyncio.Future[None]]]] = {}

    @classmethod
    async def start(cls, dsn: str, recheck_s: float = 0.25) -> PositionWatch:
        conn = await asyncpg.connect(dsn)
        watch = cls(conn, recheck_s)
        await conn.add_listener(NOTIFY_CHANNEL, watch._on_notify)
        return watch

    def _on_notify(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        name, _, seq_text = str(payload).rpartition(":")
        try:
            self._advance(name, int(seq_text))
        except ValueError:
            log.warning("unexpected projection notification", extra={"payload": payload})

    def _advance(self, name: str, seq: int) -> None:
        if seq <= self.known.get(name, 0):
            return
        self.known[name] = seq
        waiting = self._waiters.get(name)
        if not waiting:
            return
        keep = []
        for want, fut in waiting:
            if want <= seq:
                if not fut.done():
                    fut.set_result(None)
            else:
                keep.append((want, fut))
        self._waiters[name] = keep

    async def wait(self, pool: asyncpg.Pool, name: str, seq: int, *, timeout: float = 5.0) -> None:
        """Return once projection `name` has applied `seq`; TimeoutError after `timeout` s."""
        if self.known.get(name, 0) >= seq:
            return
        if self._conn.is_closed():
            return await wait_applied(pool, name, seq, timeout=timeout)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(name, []).append((seq, fut))
        deadline = time.monotonic() + timeout
        ask_db = name not in self.known  # heard of: every later commit notifies us
        try:
            while True:
                if ask_db:  # after registering: a commit between the two is not missed
                    self._advance(name, await last_applied(pool, name))
                ask_db = True
                if fut.done():
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"projection {name} did not reach seq {seq} in {timeout} s")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(fut), min(self.recheck_s, remaining))
                    return
        finally:
            if not fut.done():
                fut.cancel()
                waiting = self._waiters.get(name, [])
                self._waiters[name] = [(s, f) for s, f in waiting if f is not fut]

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._conn.close(timeout=2.0)
