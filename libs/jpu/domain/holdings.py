"""Who holds each GPU (SPEC §1.2, P1–P2): the ClusterState as the policy core's GPU rows and
running jobs. Placements are not stored (P1): the core groups these rows by (node, tier)."""

from __future__ import annotations

from jpu.domain.cluster import ClusterState
from jpu.policy.model import Gpu, RunningJob


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
