"""Which GPUs exist and who holds each (SPEC §1.2, P1–P2): the ClusterState as the policy core's
GPU rows and running jobs, and the inventory the agent reports. Placements are not stored (P1):
the core groups these rows by (node, tier)."""

from __future__ import annotations

from jpu.backends.base import NodeInventory
from jpu.domain.cluster import ClusterState
from jpu.domain.states import PLACED
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
        if j.placement is not None and j.state in PLACED:
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


def with_missing(
    observed: list[NodeInventory], configured: dict[str, dict[str, int]]
) -> list[NodeInventory]:
    """The backend's nodes, plus every configured node it does not know, all GPUs down (P2):
    a node in the configuration but not in Slurm (a typo, or not yet added) must take no job."""
    known = {inv.node for inv in observed}
    missing = [
        NodeInventory(
            node=name,
            gpus=dict(gpus),
            down={t: list(range(n)) for t, n in gpus.items()},
            state="down",
            reason="not in the backend's inventory",
        )
        for name, gpus in sorted(configured.items())
        if name not in known
    ]
    return [*observed, *missing]
