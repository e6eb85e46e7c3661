"""`run_agent`: the slurm-agent's three loops over one backend (SPEC E4, §5).

  1. inventory: NodeInventoryObserved for every node at start, then for a node whose view changed;
  2. recovery, then the durable consumer of job events: every event feeds the agent's fold of
     the jobs (cache.py); JobDispatched → launch, JobCancelRequested → cancel (JobAgent), the
     jobs of one batch concurrently (each job has its own lock);
  3. the watch loop: poll running backend jobs with backoff, JobEnded when one ends;
  4. with podman containers, the workspace-builder (builder.py, SPEC X4a).

Restart (SPEC O5): recovery folds every job subject of the log; an attempt the log says is
launched and not ended is watched again (re-adopted), one dispatched and not started is launched
(the backend's `find` and idempotent submit prevent a second run), and a backend job the log does
not account for is cancelled (no orphan holds GPUs the dispatcher believes free).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Iterable, Mapping

from jpu.backends import BackendStatus, ExecutionBackend, NodeInventory, UnknownBackendJob
from jpu.backends.base import NotifiesEnds
from jpu.backends.workspaces import Workspaces
from jpu.bus import Delivered, EventBus
from jpu.config import Config, Tier
from jpu.domain.execution import AgentJob, fold_job, next_action
from jpu.domain.holdings import with_missing
from jpu.domain.retention import EndedJob
from jpu.events import JobCancelRequested, JobDispatched, NodeInventoryObserved, new_event_id
from jpu.runtime.clock import Clock
from jpu.runtime.metrics import count_outputs_pruned, observing_outputs_disk
from jpu.runtime.service import wait_any
from jpu_services.slurm_agent.agent import JobAgent
from jpu_services.slurm_agent.builder import WorkspaceBuilder
from jpu_services.slurm_agent.options import AgentOptions
from jpu_services.slurm_agent.recovery import fold_log
from jpu_services.slurm_agent.retention import ReadJob, prune_loop
from jpu_services.slurm_agent.watchlist import Watched

log = logging.getLogger(__name__)

_WATCH_RETRY_S = 1.0  # after a failed watch round (a JobEnded not appended yet)


async def run_agent(
    bus: EventBus,
    config: Config,
    backend: ExecutionBackend,
    clock: Clock,
    stop: asyncio.Event,
    options: AgentOptions | None = None,
) -> None:
    """Run until `stop` is set. The caller owns (and closes) the bus and the backend."""
    options = options or AgentOptions.from_config(config)
    with observing_outputs_disk(options.output_root):
        await _run(bus, config, backend, clock, stop, options)


async def _run(
    bus: EventBus,
    config: Config,
    backend: ExecutionBackend,
    clock: Clock,
    stop: asyncio.Event,
    options: AgentOptions,
) -> None:
    agent = JobAgent(bus, {t.name: t for t in config.tiers}, backend, clock, options)
    if isinstance(backend, NotifiesEnds):  # an end seen by the backend is polled at once
        backend.notify_ends(agent.watch.poke)
    inventory = InventoryReporter(bus, backend, clock, {n.name: dict(n.gpus) for n in config.nodes})
    await inventory.report(force=True)
    recovered_to = await recover(agent, bus, config)

    async def handle(batch: list[Delivered]) -> None:
        for d in batch:
            agent.cache.observe(d)
        await _all(agent.reconcile(job_id) for job_id in _jobs_to_reconcile(batch, recovered_to))

    tasks = [
        asyncio.create_task(
            bus.consume(
                options.durable, handle, stop=stop, filter_subject=f"{config.subject_prefix}.job.>"
            ),
            name="agent-consume",
        ),
        asyncio.create_task(watch_loop(agent, inventory, stop), name="agent-watch"),
        asyncio.create_task(inventory.loop(stop, options.inventory_every_s), name="agent-inv"),
    ]
    if config.outputs_keep_days > 0:  # the site bounds how long outputs are kept
        count_outputs_pruned(0)  # SPEC O4: at 0 from the start
        pruning = prune_loop(
            options.output_root,
            ended_reader(bus, agent.tiers),
            clock,
            config.outputs_keep_days,
            agent.cache.jobs,
            stop,
        )
        tasks.append(asyncio.create_task(pruning, name="agent-prune"))
    builder = workspace_builder(bus, backend, clock, config)
    if builder is not None:  # X4a: the workspace-builder role, where the images are needed
        durable = f"{options.durable}-workspaces"
        tasks.append(asyncio.create_task(builder.run(stop, durable), name="agent-builder"))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # a crashed loop crashes the service (the supervisor restarts it)
            if not stop.is_set():  # never a silent stop: a loop's end is an error
                raise RuntimeError(f"{task.get_name()} ended before stop")
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def workspace_builder(
    bus: EventBus, backend: ExecutionBackend, clock: Clock, config: Config
) -> WorkspaceBuilder | None:
    """X4a: a backend that runs jobs in podman containers builds the workspaces (its images
    live in its podman store); the others have no builder."""
    spaces = getattr(backend, "workspaces", None)
    if not getattr(backend, "builds_workspaces", False) or not isinstance(spaces, Workspaces):
        return None
    return WorkspaceBuilder(bus, spaces, clock, config.subject_prefix)


def ended_reader(bus: EventBus, tiers: Mapping[str, Tier]) -> ReadJob:
    """A job's end as its own events say, read fresh from the log (never the agent's cache)."""

    async def read(job_id: str) -> EndedJob | None:
        events = await bus.job_events(job_id)
        job = fold_job(events, tiers)
        if job is None:
            return None
        return EndedJob(terminal=job.view.terminal, last_event_ts=events[-1].event.ts)

    return read


def _jobs_to_reconcile(batch: list[Delivered], recovered_to: int) -> list[str]:
    """Jobs a batch concerns, in order, once each; recovery already handled older events."""
    ids: dict[str, None] = {}
    for d in batch:
        if d.seq > recovered_to and isinstance(d.event, JobDispatched | JobCancelRequested):
            ids[d.event.job_id] = None
    return list(ids)


async def recover(agent: JobAgent, bus: EventBus, config: Config) -> int:
    """Re-adopt from the log; cancel backend jobs the log does not account for."""
    found = await fold_log(bus, config)
    agent.cache.seed(found.jobs.values())
    active: list[AgentJob] = [j for j in found.jobs.values() if next_action(j) is not None]
    for job in active:
        await agent.reconcile(job.view.job_id, job)
    await _cancel_orphans(agent, bus, config)
    log.info(
        "recovered: %d active attempts, log at seq %d%s",
        len(active),
        found.last_seq,
        f" (from the snapshot at seq {found.restored_from})" if found.restored_from else "",
    )
    return found.last_seq


async def _cancel_orphans(agent: JobAgent, bus: EventBus, config: Config) -> None:
    """A backend job no active attempt of the log owns holds GPUs the dispatcher thinks free.
    The log is read again first: an attempt launched meanwhile (another agent) is not an orphan."""
    suspects = set(await agent.backend.running()) - set(agent.watch.jobs)
    if not suspects:
        return
    for job in (await fold_log(bus, config)).jobs.values():
        if next_action(job) is not None:
            suspects.discard(await agent.backend.find(job.view.job_id, job.attempt) or "")
    for bid in sorted(suspects):
        log.warning("backend job %s is not accounted for by the log: cancelling it", bid)
        with contextlib.suppress(UnknownBackendJob):
            await agent.backend.cancel(bid, agent.options.cancel_grace_s)


async def watch_loop(agent: JobAgent, inventory: InventoryReporter, stop: asyncio.Event) -> None:
    while not stop.is_set():
        try:
            await _all(_check(agent, inventory, w) for w in agent.watch.due())
        except Exception:  # e.g. JobEnded not appended yet: the job stays watched, tried again
            log.exception("watch round failed; retrying")
            await wait_any(_WATCH_RETRY_S, stop)
        await agent.watch.wait(stop)


async def _check(agent: JobAgent, inventory: InventoryReporter, w: Watched) -> None:
    status = await _poll(agent, w.backend_job_id)
    if status is None or not status.terminal:
        agent.watch.backoff(w)
        return
    if await agent.finish(w.job_id, w.attempt, w.backend_job_id, status):
        agent.watch.drop(w.backend_job_id)
    if status.kill_failed:
        inventory.poke()  # X5: the node was drained


async def _all(work: Iterable[Awaitable[None]]) -> None:
    """Run concurrently; once all settled, raise the first failure (the consumer retries the
    batch; reconciling is idempotent)."""
    for result in await asyncio.gather(*work, return_exceptions=True):
        if isinstance(result, BaseException):
            raise result


async def _poll(agent: JobAgent, bid: str) -> BackendStatus | None:
    """The backend's status; None when the backend cannot answer now (retried with backoff)."""
    try:
        return await agent.backend.poll(bid)
    except UnknownBackendJob:
        return BackendStatus(state="NODE_FAIL", reason="the backend lost the job")
    except Exception:
        log.exception("polling %s failed; retrying", bid)
        return None


class InventoryReporter:
    """NodeInventoryObserved at start and whenever a node's view changes (configured nodes the
    backend does not know included, as down)."""

    def __init__(
        self,
        bus: EventBus,
        backend: ExecutionBackend,
        clock: Clock,
        configured: dict[str, dict[str, int]] | None = None,
    ) -> None:
        self.bus, self.backend, self.clock = bus, backend, clock
        self.configured = configured or {}
        self._last: dict[str, NodeInventory] = {}
        self._poke = asyncio.Event()

    def poke(self) -> None:
        self._poke.set()

    async def report(self, force: bool = False) -> None:
        for inv in with_missing(await self.backend.inventory(), self.configured):
            if not force and self._last.get(inv.node) == inv:
                continue
            await self.bus.append(
                NodeInventoryObserved(
                    event_id=new_event_id(),
                    ts=self.clock.now(),
                    node=inv.node,
                    gpus=dict(inv.gpus),
                    down=dict(inv.down),
                    state=inv.state,
                )
            )
            self._last[inv.node] = inv

    async def loop(self, stop: asyncio.Event, every_s: float) -> None:
        while not stop.is_set():
            await wait_any(every_s, self._poke, stop)
            self._poke.clear()
            if stop.is_set():
                return
            try:
                await self.report()
            except Exception:  # NATS unreachable past an election: report at the next round
                log.exception("inventory report failed; retrying")
