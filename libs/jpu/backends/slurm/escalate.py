"""Cancels and sub-minute time limits of Slurm jobs, driven to the end (SPEC X5).

  cancel      `scancel --full --signal=TERM` at once (the batch script and its steps: a job's
              TERM trap can checkpoint; plain `scancel --signal` would reach the steps only),
              then after the grace `scancel --batch --signal=KILL`: the batch script dies at once
              and Slurm ends the job, killing its steps. (Measured on 22.05: after a TERM, a
              `--full` KILL or a plain `scancel` only lands after Slurm's KillWait.) A signal
              that raced the batch step's launch is lost, so 2 s later a job still there gets
              Slurm's own `scancel` (pending jobs get it at once). Then, if
              Slurm still runs the job `kill_failed_after_s` later, the attempt is recorded
              CANCELLED with kill_failed and its node drained with that reason.
  time limit  Slurm's `--time` is whole minutes and it enforces those itself (TIMEOUT). A limit
              finer than that is enforced here, to the second: SIGTERM, the grace, SIGKILL, and
              the attempt ends TIMEOUT.

One task per backend, alive only while some attempt has a deadline: it sleeps until the earliest
one (or a wake-up), never spins. Intents and deadlines are saved before each signal, so a
restarted agent continues where this one stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from jpu.backends.base import BackendError, BackendStatus
from jpu.backends.slurm.cli import SlurmCli
from jpu.backends.slurm.parse import SlurmJob
from jpu.backends.slurm.records import Intent, SlurmRecord, SlurmRecordStore
from jpu.backends.slurm.settings import SlurmSettings
from jpu.backends.slurm.submit import enforced_by_backend

log = logging.getLogger(__name__)

_IDLE_CHECK_S = 5.0  # a pending job with a time limit: how often to look again
_RECANCEL_S = 2.0  # after a SIGKILL, when Slurm's own cancel follows if the job is still there
_NEW_JOB_S = 30.0  # a job missing from the snapshot this soon after sbatch is looked for again


class Escalated(Protocol):
    """What the escalator reads and changes of the backend it serves (SlurmBackend)."""

    @property
    def cli(self) -> SlurmCli: ...
    @property
    def settings(self) -> SlurmSettings: ...
    @property
    def store(self) -> SlurmRecordStore: ...

    def active_records(self) -> list[SlurmRecord]:
        """The attempts Slurm was given and whose end is not recorded yet."""
        ...

    async def snapshot(self) -> dict[int, SlurmJob]:
        """Slurm's jobs by id, fresh enough for a poll."""
        ...

    def save(self, record: SlurmRecord) -> None: ...


class Escalator:
    def __init__(self, backend: Escalated) -> None:
        self.backend = backend
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._recancelled: set[int] = set()

    def kick(self) -> None:
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="slurm-escalator")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def request(
        self, record: SlurmRecord, intent: Intent, grace_s: float, *, pending: bool
    ) -> None:
        """Begin (or hurry) a cancel or timeout; the intent is saved before the signal."""
        cli, now = self.backend.cli, time.time()
        assert record.slurm_id is not None
        if record.intent is not None:
            if (
                record.killed_at is None
                and record.kill_at is not None
                and now + grace_s < record.kill_at
            ):
                record.kill_at = now + grace_s  # a second cancel may only hurry the first
                self.backend.save(record)
                self.kick()
            return
        record.intent, record.term_at = intent, now
        record.kill_at = now if pending else now + grace_s
        self.backend.save(record)
        if pending:  # nothing runs yet: nothing to checkpoint
            await self._kill(record, now, pending=True)
        else:
            await cli.scancel(record.slurm_id, "--full", "--signal=TERM")
            log.info(
                "Slurm job %d: SIGTERM (%s), SIGKILL in %.1fs", record.slurm_id, intent, grace_s
            )
        self.kick()

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                due = await self._step(time.time())
            except BackendError as e:  # slurmctld briefly unreachable: try again soon
                log.warning("escalation step failed: %s", e)
                due = time.time() + 1.0
            if due is None:
                return
            timeout = max(due - time.time(), self.backend.settings.refresh_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    async def _step(self, now: float) -> float | None:
        """One pass over the attempts with deadlines; returns when the next one is due."""
        records = [r for r in self.backend.active_records() if _has_deadline(r)]
        if not records:
            return None
        jobs = await self.backend.snapshot()
        due: list[float] = []
        for record in records:
            assert record.slurm_id is not None
            job = jobs.get(record.slurm_id)
            if job is None:  # not in the snapshot yet (just submitted) or long forgotten
                if now - record.submitted_at < _NEW_JOB_S:
                    due.append(now + self.backend.settings.refresh_s)
                continue
            if job.terminal:
                continue  # poll records the end
            if record.intent is None and job.state == "RUNNING" and job.start_time:
                deadline = job.start_time + (record.time_limit_s or 0.0)
                if now >= deadline:
                    await self.request(
                        record, "timeout", self.backend.settings.timeout_grace_s, pending=False
                    )
                else:
                    due.append(deadline)
                continue
            if record.intent is None:
                due.append(now + _IDLE_CHECK_S)  # pending: the limit starts with the job
                continue
            if record.killed_at is None and record.kill_at is not None:
                if now >= record.kill_at:
                    await self._kill(record, now)
                else:
                    due.append(record.kill_at)
            if record.killed_at is not None:
                await self._cancel_if_still_there(record, now, due)
                limit = record.killed_at + self.backend.settings.kill_failed_after_s
                if now >= limit:
                    await self._kill_failed(record, now, job.start_time)
                else:
                    due.append(limit)
        return min(due) if due else None  # nothing left to escalate: the task ends

    async def _kill(self, record: SlurmRecord, now: float, *, pending: bool = False) -> None:
        assert record.slurm_id is not None
        record.killed_at = now
        self.backend.save(record)
        cli = self.backend.cli
        if pending or not await cli.scancel(record.slurm_id, "--batch", "--signal=KILL"):
            await cli.scancel(record.slurm_id)  # nothing to signal: Slurm's own cancel
        log.warning("Slurm job %d: SIGKILL after the grace", record.slurm_id)

    async def _cancel_if_still_there(
        self, record: SlurmRecord, now: float, due: list[float]
    ) -> None:
        """A signal that raced the launch of the batch step is lost (Slurm says RUNNING before
        slurmd has started the script): `_RECANCEL_S` after the kill, Slurm's own cancel."""
        assert record.slurm_id is not None and record.killed_at is not None
        if record.slurm_id in self._recancelled:
            return
        if now < record.killed_at + _RECANCEL_S:
            due.append(record.killed_at + _RECANCEL_S)
            return
        self._recancelled.add(record.slurm_id)
        await self.backend.cli.scancel(record.slurm_id)

    async def _kill_failed(self, record: SlurmRecord, now: float, started_at: float | None) -> None:
        """X5: still there after SIGKILL + kill_failed_after_s: drain the node, then record it.
        In that order: whoever reads the kill_failed status finds the node drained already (a
        crash in between drains again on the next pass, which Slurm takes as a no-op)."""
        reason = f"kill_failed: Slurm job {record.slurm_id} survived SIGKILL"
        self.backend.store.note_drained(record.node, reason)
        try:
            await self.backend.cli.drain(record.node, reason)
        except BackendError as e:
            log.error("could not drain %s: %s", record.node, e)
        log.error("node %s drained: %s", record.node, reason)
        record.kill_failed = True
        record.final = BackendStatus(
            state="CANCELLED",
            started_at=started_at,
            ended_at=now,
            kill_failed=True,
            cancelled_by_us=record.intent == "cancel",
            node=record.node,
            isolation=record.isolation,
            reason=reason,
        )
        self.backend.save(record)


def _has_deadline(record: SlurmRecord) -> bool:
    return record.intent is not None or enforced_by_backend(record.time_limit_s)
