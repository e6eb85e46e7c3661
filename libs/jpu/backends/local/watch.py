"""One watcher task per local attempt: waits for its end, enforces the time limit, escalates a
cancel (SIGTERM → grace → SIGKILL → kill_failed; SPEC X5) and records the final status.

It sleeps until the next deadline or a wake-up (cancel), never spins: our own children are
awaited; adopted processes (a previous agent's children) are checked in /proc every
`adopted_poll_s`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from jpu.backends import containers
from jpu.backends import process as proc_
from jpu.backends.base import BackendState, BackendStatus
from jpu.backends.local.records import Intent, JobRecord, RecordStore
from jpu.backends.local.settings import LocalSettings

log = logging.getLogger(__name__)

_TERM_RETRY_S = 0.2


class ProcessWatcher:
    def __init__(
        self,
        record: JobRecord,
        process: asyncio.subprocess.Process | None,
        store: RecordStore,
        settings: LocalSettings,
        on_kill_failed: Callable[[JobRecord], None],
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        self.record = record
        self.process = process
        self.store = store
        self.settings = settings
        self.on_kill_failed = on_kill_failed
        self.on_end = on_end
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._reaped: asyncio.Future[int] | None = None
        self._term: asyncio.Future[None] | None = None

    def start(self) -> None:
        if self.process is not None:
            self._reaped = asyncio.ensure_future(self.process.wait())
        self._task = asyncio.create_task(self._run(), name=f"watch-{self.record.backend_job_id}")

    async def stop(self) -> None:
        for task in (self._task, self._reaped, self._term):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def request(self, intent: Intent, grace_s: float) -> None:
        """Begin a cancel or a timeout: the intent is persisted before the signal is sent."""
        r, now = self.record, time.time()
        if r.intent is not None:
            if r.killed_at is None and r.kill_at is not None:
                r.kill_at = min(r.kill_at, now + grace_s)  # a second cancel may only hurry it
                self.store.save(r)
                self._wake.set()
            return
        r.intent, r.term_at, r.kill_at = intent, now, now + grace_s
        self.store.save(r)
        if r.container:
            self._term = asyncio.ensure_future(self._term_container())
        else:
            proc_.signal_group(r.pid, signal.SIGTERM)
        log.info("%s: SIGTERM (%s), SIGKILL in %.1fs", r.backend_job_id, intent, grace_s)
        self._wake.set()

    async def _run(self) -> None:
        r = self.record
        if r.pid == 0:  # no process: never spawned (a backfill instance), or (its pid unsaved,
            # adopt_unsaved_spawn) the attempt ran unwatched: its status files say how it ended
            status = self.store.status_file(r.backend_job_id)
            ran = status.exists() or proc_.start_file(status).exists()
            await asyncio.to_thread(self._end_container)
            self._finish(reason=None if ran else "never started")
        while r.final is None:
            now = time.time()
            self._escalate(now)
            if r.final is None and await self._exited(self._timeout(now)):
                await asyncio.to_thread(self._end_container)
                self._finish(save=False)
                await asyncio.to_thread(self.store.save, r)  # the fsync off the event loop
        if self.on_end is not None:  # saved: the agent may poll it now (SPEC X6)
            self.on_end(r.backend_job_id)

    async def _term_container(self) -> None:
        """X4a, X5: the SIGTERM goes straight to the container's init (`podman kill`), never
        through the podman client's signal proxy: a proxy that finds the container not yet
        marked running re-sends the signal to the client itself, the client dies, and the
        container is then removed without its grace. Retried until it arrives, the attempt
        ends, or the grace is over (the SIGKILL then goes to the group and the container)."""
        r = self.record
        while r.final is None and r.killed_at is None:
            if await asyncio.to_thread(containers.kill, r.podman, r.container, "TERM"):
                return
            await asyncio.sleep(_TERM_RETRY_S)

    def _end_container(self) -> None:
        """X4a: the attempt ends with its container. Usually podman has removed it already
        (`--rm`); after a SIGKILL, which reaches only the podman client, or a wrapper that
        vanished, this is what ends the job inside (X5)."""
        if self.record.container:
            containers.remove(self.record.podman, self.record.container)

    def _escalate(self, now: float) -> None:
        r, s = self.record, self.settings
        if r.intent is None and r.time_limit_s is not None and now >= r.started_at + r.time_limit_s:
            self.request("timeout", s.timeout_grace_s)
        if r.intent and r.killed_at is None and r.kill_at is not None and now >= r.kill_at:
            r.killed_at = now
            self.store.save(r)
            proc_.signal_group(r.pid, signal.SIGKILL)
            log.warning("%s: SIGKILL after the grace", r.backend_job_id)
        if r.killed_at is not None and now >= r.killed_at + s.kill_failed_after_s:
            self._finish(kill_failed=True)
            self.on_kill_failed(r)

    def _timeout(self, now: float) -> float:
        r, s = self.record, self.settings
        deadlines = [now + 3600.0]
        if r.intent is None and r.time_limit_s is not None:
            deadlines.append(r.started_at + r.time_limit_s)
        if r.intent and r.killed_at is None and r.kill_at is not None:
            deadlines.append(r.kill_at)
        if r.killed_at is not None:
            deadlines.append(r.killed_at + s.kill_failed_after_s)
        wait = min(deadlines) - now
        if self._reaped is None:
            wait = min(wait, s.adopted_poll_s)
        return max(wait, 0.0)

    async def _exited(self, timeout: float) -> bool:
        self._wake.clear()
        woken = asyncio.ensure_future(self._wake.wait())
        waits: set[asyncio.Future[object]] = {woken}  # type: ignore[arg-type]
        if self._reaped is not None:
            waits.add(self._reaped)  # type: ignore[arg-type]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            woken.cancel()
        if self._reaped is not None:
            return self._reaped.done()
        return not proc_.is_alive(self.record.pid, self.record.ticks)

    def _finish(
        self, *, kill_failed: bool = False, reason: str | None = None, save: bool = True
    ) -> None:
        r = self.record
        status_file = self.store.status_file(r.backend_job_id)
        rc, written_at = proc_.read_status(status_file)
        if not r.started_at:  # ended while no agent watched (its pid unsaved): the wrapper knows
            r.started_at = proc_.read_start(status_file) or 0.0
        sig = None
        if self._reaped is not None and self._reaped.done() and not self._reaped.cancelled():
            returncode = self._reaped.result()
            sig = -returncode if returncode < 0 else None
        if rc is not None and rc > 128:
            sig = rc - 128  # bash reports a job killed by signal n as 128 + n
        if not kill_failed and r.pid:
            proc_.signal_group(r.pid, signal.SIGKILL)  # no orphans: a job ends with its group
        state = _final_state(r.intent, rc, kill_failed)
        if state == "NODE_FAIL" and reason is None:
            reason = "the job's process vanished without an exit status"
        out = Path(r.output_dir)
        r.final = BackendStatus(
            state=state,
            exit_code=rc,
            started_at=r.started_at or None,
            ended_at=max(written_at or time.time(), r.started_at),  # mtime ticks are coarse
            signal=sig,
            kill_failed=kill_failed,
            cancelled_by_us=r.intent == "cancel",
            node=r.node,
            output_tail=proc_.tail([out / "stdout", out / "stderr"], self.settings.tail_bytes),
            isolation=r.isolation,
            reason=reason,
        )
        if save:
            self.store.save(r)
        log.info("%s ended %s exit=%s", r.backend_job_id, state, rc)


def _final_state(intent: Intent | None, rc: int | None, kill_failed: bool) -> BackendState:
    if intent == "cancel":
        return "CANCELLED"
    if intent == "timeout":
        return "TIMEOUT"
    if kill_failed:
        return "CANCELLED"
    if rc == 0:
        return "COMPLETED"
    return "FAILED" if rc is not None else "NODE_FAIL"


SpawnVerdict = Literal["adopted", "ran", "never spawned"]
# a child forked by a dying agent runs the agent's own code until its exec: after this long
# since the record was saved it has exec'd (and is found by its argv) or it never will
SPAWN_GRACE_S = 5.0


def adopt_unsaved_spawn(
    record: JobRecord, store: RecordStore, grace_s: float = SPAWN_GRACE_S
) -> SpawnVerdict:
    """A previous agent saved the record and died before saving the pid (SPEC O5). Spawned:
    the wrapper runs on in its own session — adopt it, else it would be reported "never
    started" (an attempt) or ended (a backfill instance) while it holds its GPU. Already ended
    or died: its wrapper wrote the start (and exit) status first — "ran", the watcher tells how
    it ended. Neither, `grace_s` after the save: the agent died before the fork, or the child
    died before its exec, so nothing of the job ran — "never spawned" (a research attempt may be
    launched again: it ran 0 times, SPEC O5). Research attempts and backfill instances both
    come here."""
    status = store.status_file(record.backend_job_id)
    while True:
        found = proc_.find_wrapper(status)
        if found is not None:
            record.pid, record.ticks = found
            record.started_at = proc_.started_at(record.ticks)
            store.save(record)
            log.warning("%s: adopted pid=%d spawned by a previous agent", record.backend_job_id,
                        found[0])  # fmt: skip
            return "adopted"
        if status.exists() or proc_.start_file(status).exists():
            return "ran"
        wait = grace_s - (time.time() - store.saved_at(record.backend_job_id))
        if wait <= 0:
            return "never spawned"
        time.sleep(min(wait, 0.1))
