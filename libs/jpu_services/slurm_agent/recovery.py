"""The agent's view at restart: the attempts the log says it owes something (SPEC §5, O5).

The jobs in flight come from the services' shared fold (jpu.domain.cluster.ClusterState): the
newest snapshot plus the log's tail (SPEC O6), not a replay of every job subject from seq 1. Only
the jobs that hold a placement can owe the agent anything (jpu.domain.execution.next_action), and
those are bounded by the GPUs: each is folded into an AgentJob from its own subject (the request,
the attempt's dispatch and start, the reservation time not charged yet). Any other job is read
from the log when an event makes it the agent's business (JobAgent.read).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from jpu.bus import EventBus
from jpu.bus.fold_follow import Follower, SnapshotPolicy, caught_up
from jpu.bus.snapshots import SnapshotStore
from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.domain.execution import AgentJob, fold_job


@dataclass(frozen=True)
class Recovered:
    jobs: dict[str, AgentJob]  # the jobs holding a placement, by id
    last_seq: int  # the log folded up to here; later events reach the durable consumer
    restored_from: int  # the snapshot's seq the fold started from (0: a full replay)


async def fold_log(bus: EventBus, config: Config) -> Recovered:
    """The log up to its last seq now, as the AgentJobs that may owe something."""
    state = ClusterState.new(config, keep_ended=False)
    policy = None
    if config.snapshots:  # read only: writing them is the followers' job
        store = SnapshotStore.configured(bus.js, bus.stream, config)
        policy = SnapshotPolicy(store, config, every_events=2**62, every_s=float("inf"))
    follower = Follower(bus, state, snapshots=policy)
    await follower.restore()
    stop = asyncio.Event()
    task = asyncio.create_task(follower.run(stop))
    try:
        last = await caught_up(follower, "slurm-agent fold")
    finally:
        stop.set()
        await task
    tiers = {t.name: t for t in config.tiers}
    jobs: dict[str, AgentJob] = {}
    for job_id in sorted(j.job_id for j in state.jobs.values() if j.placement is not None):
        events = [d for d in await bus.job_events(job_id) if d.seq <= last]
        job = fold_job(events, tiers)
        if job is not None:
            jobs[job_id] = job
    return Recovered(jobs, last, follower.restored_from)
