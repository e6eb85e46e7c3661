"""The slurm-agent's duties for one job (SPEC §5): launch a dispatched attempt, cancel it, record
its end. Every append carries the job subject's expected last sequence (SPEC E2), so a restarted
or concurrent agent can never record a second JobStarted or JobEnded for one attempt (SPEC O5).
A decision to act is taken on the agent's own fold of the consumed events (cache.py; a stale
fold makes the append conflict), any other decision on a fresh read of the job's events.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping

from jpu.backends import BackendError, BackendStatus, ExecutionBackend
from jpu.backends.backfill_contract import BackfillBackend
from jpu.bus import ConcurrencyConflict, Delivered, EventBus
from jpu.config import Tier
from jpu.domain.ending import cancelled_unstarted, job_ended
from jpu.domain.execution import AgentJob, fold_job, next_action
from jpu.events import JobEnded, JobStarted, new_event_id, subject_for
from jpu.runtime.clock import Clock
from jpu.runtime.metrics import record_start_delay
from jpu_services.slurm_agent.cache import JobCache
from jpu_services.slurm_agent.launch import launch_spec
from jpu_services.slurm_agent.options import AgentOptions
from jpu_services.slurm_agent.watchlist import WatchList

log = logging.getLogger(__name__)
_RETRIES = 5


class JobAgent:
    def __init__(
        self,
        bus: EventBus,
        tiers: Mapping[str, Tier],
        backend: ExecutionBackend,
        clock: Clock,
        options: AgentOptions,
    ) -> None:
        self.bus, self.tiers, self.backend = bus, tiers, backend
        self.clock, self.options = clock, options
        self.watch = WatchList(options.poll_min_s, options.poll_max_s)
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._cancel_sent: set[tuple[str, int]] = set()
        self.cache = JobCache(tiers)  # fed by the consumer (run.py)

    async def read(self, job_id: str) -> AgentJob | None:
        return fold_job(await self.bus.job_events(job_id), self.tiers)

    async def reconcile(self, job_id: str, job: AgentJob | None = None) -> None:
        """Do what the job's events say the agent owes it; re-read and retry on a conflict."""
        async with self._locks[job_id]:
            job = job or self.cache.owed(job_id)  # else: nothing owed, or not folded → read
            for _ in range(_RETRIES):
                job = job or await self.read(job_id)
                if job is None:
                    return
                try:
                    await self._act(job)
                    return
                except ConcurrencyConflict as e:
                    log.info("job %s moved meanwhile (%s); deciding again", job_id, e)
                    job = None
            raise RuntimeError(f"job {job_id}: gave up after {_RETRIES} conflicts")

    async def _act(self, job: AgentJob) -> None:
        action = next_action(job)
        if action == "submit":
            await self._submit(job)
        elif action == "watch":
            assert job.started is not None
            self.watch.track(job.view.job_id, job.attempt, job.started.backend_job_id)
        elif action == "cancel":
            assert job.started is not None
            await self._cancel(job, job.started.backend_job_id)
        elif action == "cancel_unstarted":
            bid = await self.backend.find(job.view.job_id, job.attempt)
            if bid is None:  # nothing runs: the attempt ends here
                end = cancelled_unstarted(job, self._tier(job), self.now(), new_event_id())
                await self._append_end(job, end)
                return
            await self._started(job, bid)  # it did start: record it, then cancel it
            await self._cancel(job, bid)

    async def _submit(self, job: AgentJob) -> None:
        """X1–X4: at most one backend job per attempt (find, idempotent submit, expected seq)."""
        spec = launch_spec(job, self._tier(job), self.options.output_root)
        try:
            bid = await self.backend.find(spec.job_id, spec.attempt)
            if bid is None:
                await self._preempt_backfill(spec.node, spec.tier, spec.gpus)
            bid = bid or await self.backend.submit(spec)
        except BackendError as e:
            log.error("job %s attempt %d: launch failed: %s", spec.job_id, spec.attempt, e)
            failed = BackendStatus(state="NODE_FAIL", reason=f"launch failed: {e}")
            end = job_ended(job, failed, self._tier(job), None, self.now(), new_event_id())
            await self._append_end(job, end)
            return
        await self._started(job, bid)
        self.watch.track(spec.job_id, spec.attempt, bid)

    async def _preempt_backfill(self, node: str, tier: str, gpus: list[int]) -> None:
        """SPEC B2: research wins — LLM backfill on these GPUs ends before the job starts. The
        backfill service sees the dispatch and records BackfillEnded(preempted)."""
        if isinstance(self.backend, BackfillBackend):
            grace = self.options.backfill_grace_s
            await self.backend.preempt_backfill(node, tier, gpus, grace)

    async def _started(self, job: AgentJob, bid: str) -> None:
        status = await self.backend.poll(bid)
        event = JobStarted(
            event_id=new_event_id(),
            ts=self.now(),
            job_id=job.view.job_id,
            attempt=job.attempt,
            backend_job_id=bid,
            isolation=status.isolation,
        )
        await self._append(job, event)
        if job.dispatched is not None:  # SPEC O4: dispatch → running, by the events' own times
            record_start_delay(event.ts - job.dispatched.ts, job.dispatched.tier)
        log.info(
            "job %s attempt %d started as %s (%s)", event.job_id, job.attempt, bid, status.isolation
        )

    async def _cancel(self, job: AgentJob, bid: str) -> None:
        key = (job.view.job_id, job.attempt)
        if key not in self._cancel_sent:  # X5: SIGTERM now, SIGKILL after the grace
            await self.backend.cancel(bid, self.options.cancel_grace_s)
            self._cancel_sent.add(key)
        self.watch.track(job.view.job_id, job.attempt, bid, urgent=True)

    async def finish(self, job_id: str, attempt: int, bid: str, status: BackendStatus) -> bool:
        """X6: record the attempt's end once; True when it is recorded (now or before)."""
        async with self._locks[job_id]:
            for i in range(_RETRIES + 1):
                # first the fold; "nothing to record" is only ever concluded on a fresh read
                job = self.cache.owed(job_id) if i == 0 else await self.read(job_id)
                if job is None or job.attempt != attempt or job.started is None:
                    if i == 0:
                        continue
                    return True  # the attempt is no longer this one's to end
                if next_action(job) not in ("watch", "cancel"):
                    if i == 0:
                        continue
                    return True  # already ended (by an earlier run of this agent)
                try:
                    end = job_ended(job, status, self._tier(job), bid, self.now(), new_event_id())
                    await self._append_end(job, end)
                    self._cancel_sent.discard((job_id, attempt))
                    return True
                except ConcurrencyConflict:
                    continue
            return False

    async def _append_end(self, job: AgentJob, event: JobEnded) -> None:
        await self._append(job, event)
        log.info(
            "job %s attempt %d ended %s (%s)",
            event.job_id,
            event.attempt,
            event.state,
            event.reason,
        )

    async def _append(self, job: AgentJob, event: JobStarted | JobEnded) -> None:
        """Append after the job's last folded event (SPEC E2) and fold it at once."""
        expected = job.last_seq
        seq = await self.bus.append(event, expected_last_subject_seq=expected)
        d = Delivered(seq, subject_for(event, self.bus.prefix), event, {})
        job.apply(d, self.tiers)
        self.cache.appended(event.job_id, expected, d)

    def _tier(self, job: AgentJob) -> Tier:
        assert job.dispatched is not None
        return self.tiers[job.dispatched.tier]

    def now(self) -> float:
        return self.clock.now()
