"""Test helpers over the fold: number events as the bus delivers them and fold them, watch the
log, act as intake or as the slurm-agent by hand.

Used by tests/integration/test_{dispatcher,accounting,intake}_*.py; not imported by services.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from jpu.bus import Delivered, EventBus
from jpu.bus.fold_follow import Follower
from jpu.bus.views import ViewStore
from jpu.config import Cluster, Config
from jpu.domain.cluster import ClusterState, evolve
from jpu.events import (
    AnyEvent,
    Event,
    JobEnded,
    JobPromoted,
    JobStarted,
    JobSubmitted,
    new_event_id,
    subject_for,
)
from jpu.runtime.clock import Clock


def as_log(events: Iterable[AnyEvent]) -> list[Delivered]:
    """`events` as the bus delivers them: numbered from 1, each on its own subject."""
    return [Delivered(i, subject_for(e), e, {}) for i, e in enumerate(events, start=1)]


def fold(log: Iterable[Delivered], onto: ClusterState) -> ClusterState:
    """The domain's fold (SPEC E1) of `log`, carried on from `onto` (a new or restored state)."""
    for d in log:
        evolve(onto, d)
    return onto


def fold_events(cluster: Cluster, events: Iterable[AnyEvent]) -> ClusterState:
    """The domain's fold of `events` (as_log) from an idle `cluster`."""
    return fold(as_log(events), ClusterState.new(cluster))


class Watcher:
    """A ClusterState following the log in the background (what a test observes)."""

    def __init__(self, bus: EventBus, config: Config) -> None:
        self.bus = bus
        self.state = ClusterState.new(config)
        self.follower = Follower(bus, self.state)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watcher:
        self._task = asyncio.create_task(self.follower.run(self._stop))
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def until(self, pred: Callable[[ClusterState], Any], timeout: float = 10.0) -> Any:
        """Poll until `pred(state)` is truthy; returns its value (TimeoutError otherwise).
        A lookup that fails (a job the fold has not seen yet: `st.jobs[j]`) is "not yet"."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = pred(self.state)
            except LookupError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"condition not met within {timeout} s")
            await asyncio.sleep(0.02)

    async def synced(self) -> ClusterState:
        await self.follower.catch_up()
        return self.state

    async def ranked(self, job_ids: Iterable[str], timeout: float = 10.0) -> ClusterState:
        """Until the dispatcher's queue view (SPEC D1) ranks every one of `job_ids` — a cycle has
        decided on them — then the fold to the log's end, with what that cycle appended. What
        proves that a job was *not* dispatched, not a pause."""
        store, want = ViewStore(self.bus), set(job_ids)
        deadline = time.monotonic() + timeout
        while True:
            view = await store.queue()
            if view is not None and want <= set(view.order):
                return await self.synced()
            if time.monotonic() > deadline:
                raise TimeoutError(f"no queue view ranked {sorted(want)} within {timeout} s")
            await asyncio.sleep(0.05)

    def job_state(self, job_id: str) -> str | None:
        job = self.state.jobs.get(job_id)
        return job.state if job is not None else None


def job_id() -> str:
    return uuid.uuid4().hex[:12]


async def submit_global(
    bus: EventBus, clock: Clock, jid: str, lab: str, user: str, num_gpus: int, **kw: Any
) -> int:
    """Act as intake: JobSubmitted then JobPromoted (queue_entered_at = now); returns last seq."""
    now = clock.now()
    submitted = JobSubmitted(
        event_id=new_event_id(),
        ts=now,
        job_id=jid,
        lab=lab,
        user=user,
        name=f"job-{jid}",
        command="sleep 1",
        num_gpus=num_gpus,
        **kw,
    )
    seq = await bus.append(submitted, expected_last_subject_seq=0)
    promoted = JobPromoted(event_id=new_event_id(), ts=now, job_id=jid, queue_entered_at=now)
    return await bus.append(promoted, expected_last_subject_seq=seq)


async def start_job(bus: EventBus, state: ClusterState, clock: Clock, jid: str) -> int:
    """Act as the slurm-agent: the dispatched attempt is running."""
    job = state.jobs[jid]
    event = JobStarted(
        event_id=new_event_id(),
        ts=clock.now(),
        job_id=jid,
        attempt=job.attempt,
        backend_job_id=f"local-{jid}",
    )
    return await bus.append(event, expected_last_subject_seq=job.last_seq)


def end_event(
    state: ClusterState,
    config: Config,
    clock: Clock,
    jid: str,
    final: str = "COMPLETED",
    *,
    oom: bool = False,
    usage: float | None = None,
) -> Event:
    """The JobEnded the agent would emit: run time since dispatch plus uncharged reservation."""
    job = state.jobs[jid]
    assert job.placement is not None, f"{jid} is not running"
    node, tier, gpus = job.placement
    tflops = config.tier(tier).tflops
    run_s = clock.now() - (job.dispatched_at or clock.now())
    gpu_run = run_s * len(gpus)
    total = gpu_run * tflops + job.uncharged_reserved_usage if usage is None else usage
    return JobEnded(
        event_id=new_event_id(),
        ts=clock.now(),
        job_id=jid,
        attempt=job.attempt,
        state=final,  # type: ignore[arg-type]
        exit_code=0 if final == "COMPLETED" else 1,
        node=node,
        tier=tier,
        gpus=list(gpus),
        gpu_seconds_run=gpu_run,
        gpu_seconds_reserved=job.uncharged_reserved_gpu_s,
        tflops=tflops,
        usage=total,
        oom=oom,
        reason="OOM" if oom else None,
    )


async def end_job(
    bus: EventBus,
    state: ClusterState,
    config: Config,
    clock: Clock,
    jid: str,
    final: str = "COMPLETED",
    **kw: Any,
) -> int:
    event = end_event(state, config, clock, jid, final, **kw)
    return await bus.append(event, expected_last_subject_seq=state.jobs[jid].last_seq)


async def decided_on(stats: Any, seq: int, timeout: float = 10.0) -> None:
    """Wait for a dispatcher cycle that decided on the log up to `seq` (its DispatcherStats'
    `decided_seq`): what it appended is in the log by then. The positive signal for "the
    dispatcher saw it and left it" — never a sleep (a sleep proves nothing on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while stats.decided_seq < seq:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no dispatcher cycle decided on seq {seq} in {timeout} s")
        await asyncio.sleep(0.01)
