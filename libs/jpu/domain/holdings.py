"""ClusterState → the policy core's Snapshot (SPEC §1.2 GPU states, D1 queue, F3 usage)."""

from __future__ import annotations

from jpu.config import Cluster
from jpu.domain.cluster import ClusterState
from jpu.policy.charging import with_owed
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import Gpu, MaintenanceState, RunningJob, Snapshot

DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0


def gpus(state: ClusterState) -> list[Gpu]:
    """One row per physical GPU; `down` > `job:` > `reserved:` > `backfill:` > `free`."""
    rows: list[Gpu] = []
    for (node, tier), count in sorted(state.inventory.items()):
        for i in range(count):
            key = (node, tier, i)
            bf = state.backfill.get(key)
            if key in state.down:
                rows.append(Gpu(node, tier, i, "down"))
            elif key in state.holders:
                held = state.holders[key]
                rows.append(Gpu(node, tier, i, held, bf if held.startswith("reserved:") else None))
            elif bf is not None:
                rows.append(Gpu(node, tier, i, f"backfill:{bf}"))
            else:
                rows.append(Gpu(node, tier, i, "free"))
    return rows


def queue(state: ClusterState) -> LabQueues:
    """The global queue: GLOBAL_QUEUE_WAIT and RESERVING (a cancel request takes a job out),
    kept grouped by lab by the fold itself (`ClusterState.queue`)."""
    return state.queue


def running(state: ClusterState) -> list[RunningJob]:
    out = []
    for j in state.jobs.values():
        if j.placement is not None and j.state in ("DISPATCHED", "RUNNING", "CANCELLING"):
            node, tier, held = j.placement
            out.append(
                RunningJob(
                    job_id=j.job_id,
                    lab=j.lab,
                    node=node,
                    tier=tier,
                    gpus=held,
                    started_at=j.dispatched_at or 0.0,
                    time_limit_s=j.time_limit_s,
                )
            )
    return out


def snapshot(state: ClusterState, config: Cluster, half_life_s: float | None = None) -> Snapshot:
    """What the dispatch cycle decides on. `half_life_s` defaults to the config's (F3)."""
    half_life = half_life_s or float(getattr(config, "half_life_s", DEFAULT_HALF_LIFE_S))
    maintenance: MaintenanceState = state.maintenance.state  # type: ignore[assignment]
    return Snapshot(
        tiers={t.name: t for t in config.tiers},
        gpus=gpus(state),
        queue=queue(state),
        # D1/F4: with every charge the log owes, before accounting has written it
        usage=with_owed(state.usage, state.owed.values(), half_life),
        half_life_s=half_life,
        maintenance=maintenance,
        running=running(state),
        # R6: the configured demotion mode (the simulator passes the same keys, SimParams)
        reservation_demotion=config.reservation_demotion,
        reservation_demotion_margin=config.reservation_demotion_margin,
    )
