"""ClusterState → the policy core's Snapshot (SPEC §1.2 GPU states, D1 queue, F3 usage)."""

from __future__ import annotations

from jpu.config import Cluster
from jpu.fold import ClusterState, GpuKey, JobView
from jpu.policy.charging import with_owed
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import Gpu, MaintenanceState, RunningJob, Snapshot

DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0


def gpus(state: ClusterState) -> list[Gpu]:
    """One row per physical GPU (`gpu_row`), by node, tier and index."""
    return [
        gpu_row(state, (node, tier, i))
        for (node, tier), count in sorted(state.inventory.items())
        for i in range(count)
    ]


def gpu_row(state: ClusterState, key: GpuKey) -> Gpu:
    """One GPU's row: `down` > `job:` > `reserved:` > `backfill:` > `free`."""
    node, tier, i = key
    bf = state.backfill.get(key)
    if key in state.down:
        return Gpu(node, tier, i, "down")
    held = state.holders.get(key)
    if held is not None:
        return Gpu(node, tier, i, held, bf if held.startswith("reserved:") else None)
    if bf is not None:
        return Gpu(node, tier, i, f"backfill:{bf}")
    return Gpu(node, tier, i, "free")


def queue(state: ClusterState) -> LabQueues:
    """The global queue: GLOBAL_QUEUE_WAIT and RESERVING (a cancel request takes a job out),
    kept grouped by lab by the fold itself (`ClusterState.queue`)."""
    return state.queue


def running(state: ClusterState) -> list[RunningJob]:
    return [r for j in state.jobs.values() if (r := running_job(j)) is not None]


def running_job(j: JobView) -> RunningJob | None:
    """The job as the cycle sees it while it holds its placement's GPUs (None: it does not)."""
    if j.placement is None or j.state not in ("DISPATCHED", "RUNNING", "CANCELLING"):
        return None
    node, tier, held = j.placement
    return RunningJob(
        job_id=j.job_id,
        lab=j.lab,
        node=node,
        tier=tier,
        gpus=held,
        started_at=j.dispatched_at or 0.0,
        time_limit_s=j.time_limit_s,
    )


def snapshot(
    state: ClusterState,
    config: Cluster,
    half_life_s: float | None = None,
    *,
    gpu_rows: list[Gpu] | None = None,
    running_jobs: list[RunningJob] | None = None,
) -> Snapshot:
    """What the dispatch cycle decides on. `half_life_s` defaults to the config's (F3).

    `gpu_rows` / `running_jobs`: `gpus(state)` / `running(state)` when the caller keeps them
    up to date event by event (the simulator, with `gpu_row` / `running_job`)."""
    half_life = half_life_s or float(getattr(config, "half_life_s", DEFAULT_HALF_LIFE_S))
    maintenance: MaintenanceState = state.maintenance.state  # type: ignore[assignment]
    return Snapshot(
        tiers={t.name: t for t in config.tiers},
        gpus=gpus(state) if gpu_rows is None else gpu_rows,
        queue=queue(state),
        # D1/F4: with every charge the log owes, before accounting has written it
        usage=with_owed(state.usage, state.owed.values(), half_life),
        half_life_s=half_life,
        maintenance=maintenance,
        running=running(state) if running_jobs is None else running_jobs,
        # R6: the configured demotion mode (the simulator passes the same keys, SimParams)
        reservation_demotion=config.reservation_demotion,
        reservation_demotion_margin=config.reservation_demotion_margin,
    )
