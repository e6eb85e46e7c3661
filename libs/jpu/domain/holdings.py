"""Which GPUs exist and who holds each (SPEC §1.2, P1–P2): the ClusterState as the policy core's
GPU rows and running jobs, and the inventory the agent reports. Placements are not stored (P1):
the core groups these rows by (node, tier)."""

from __future__ import annotations

from jpu.domain.cluster import ClusterState, GpuKey
from jpu.domain.observed import NodeInventory
from jpu.domain.states import PLACED, JobView
from jpu.policy.model import Gpu, RunningJob


def gpus(state: ClusterState) -> list[Gpu]:
    """One row per physical GPU (`gpu_row`), by node, tier and index."""
    return [
        gpu_row(state, (node, tier, i))
        for (node, tier), count in sorted(state.inventory.items())
        for i in range(count)
    ]


def gpu_row(state: ClusterState, key: GpuKey) -> Gpu:
    """One GPU's row (`gpu_state`); a reserved GPU keeps naming its backfill (R2, B4)."""
    node, tier, i = key
    bf = state.backfill.get(key)
    shown = gpu_state(key in state.down, state.holders.get(key), bf)
    return Gpu(node, tier, i, shown, bf if shown.startswith("reserved:") else None)


def gpu_state(down: bool, holder: str | None, backfill: str | None) -> str:
    """One GPU's state (SPEC §1.2), the dispatcher's and GET /v1/placements' alike: `down` >
    its holder (`job:<id>` | `reserved:<id>`) > `backfill:<id>` > `free`."""
    if down:
        return "down"
    if holder is not None:
        return holder
    return "free" if backfill is None else f"backfill:{backfill}"


def running(state: ClusterState) -> list[RunningJob]:
    return [r for j in state.jobs.values() if (r := running_job(j)) is not None]


def running_job(j: JobView) -> RunningJob | None:
    """The job as the cycle sees it while it holds its placement's GPUs (None: it does not)."""
    if j.placement is None or j.state not in PLACED:
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
