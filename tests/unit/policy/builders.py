"""Small builders for policy tests (kueue-style): `cluster(...)`, `job(...)`, `snap(...)`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from jpu.config import Tier
from jpu.policy.model import (
    Gpu,
    LabUsage,
    MaintenanceState,
    QueuedJob,
    Reservation,
    RunningJob,
    Snapshot,
)


def tier(
    name: str,
    vram_gb: int,
    tflops: float,
    sort_order: int,
    max_gpus: int = 2,
    active: bool = True,
) -> Tier:
    return Tier(
        name=name,
        model=name,
        vram_gb=vram_gb,
        tflops=tflops,
        sort_order=sort_order,
        max_gpus=max_gpus,
        partition=name,
        active=active,
    )


RTX4090 = tier("rtx4090", 24, 82.6, 20)
RTX3080 = tier("rtx3080ti", 12, 34.1, 10)
DEFAULT_TIERS = {RTX4090.name: RTX4090, RTX3080.name: RTX3080}


def tiers(*ts: Tier) -> dict[str, Tier]:
    return {t.name: t for t in ts}


def cluster(
    *nodes: tuple[str, str, int], states: Mapping[tuple[str, int], str] | None = None
) -> list[Gpu]:
    """`cluster(("n1", "rtx4090", 2), ...)`; `states={("n1", 0): "job:x"}` (node, index)."""
    states = states or {}
    return [
        Gpu(node, t, i, states.get((node, i), "free"))
        for node, t, count in nodes
        for i in range(count)
    ]


def default_cluster(states: Mapping[tuple[str, int], str] | None = None) -> list[Gpu]:
    """SPEC §1.1: two 2×4090 nodes and two 2×3080 Ti nodes."""
    return cluster(
        ("gpu-4090x2-01", "rtx4090", 2),
        ("gpu-4090x2-02", "rtx4090", 2),
        ("gpu-3080tix2-01", "rtx3080ti", 2),
        ("gpu-3080tix2-02", "rtx3080ti", 2),
        states=states,
    )


def job(
    job_id: str,
    lab: str = "A",
    n: int = 1,
    at: float = 0.0,
    *,
    tiers: Iterable[str] | None = None,
    vram: int | None = None,
    res: Reservation | None = None,
    attempt: int = 1,
    limit: float | None = None,
    user: str = "u",
) -> QueuedJob:
    return QueuedJob(
        job_id=job_id,
        lab=lab,
        user=user,
        num_gpus=n,
        queue_entered_at=at,
        tiers=frozenset(tiers) if tiers is not None else None,
        min_vram_gb=vram,
        attempt=attempt,
        time_limit_s=limit,
        reservation=res,
    )


def reserved(node: str, tier_name: str, gpus: Iterable[int], since: float) -> Reservation:
    return Reservation(node=node, tier=tier_name, gpus=tuple(gpus), since=since)


def running(
    job_id: str, node: str, tier_name: str, gpus: Iterable[int], started: float, limit: float
) -> RunningJob:
    return RunningJob(
        job_id=job_id,
        lab="x",
        node=node,
        tier=tier_name,
        gpus=tuple(gpus),
        started_at=started,
        time_limit_s=limit,
    )


def snap(
    gpus: list[Gpu],
    queue: list[QueuedJob],
    usage: Mapping[str, float | LabUsage] | None = None,
    *,
    tier_map: dict[str, Tier] | None = None,
    maintenance: MaintenanceState = "NORMAL",
    half_life_s: float = 7 * 24 * 3600.0,
    run: list[RunningJob] | None = None,
) -> Snapshot:
    u = {
        lab: v if isinstance(v, LabUsage) else LabUsage(float(v), 0.0)
        for lab, v in (usage or {}).items()
    }
    return Snapshot(
        tiers=tier_map or DEFAULT_TIERS,
        gpus=gpus,
        queue=queue,
        usage=u,
        half_life_s=half_life_s,
        maintenance=maintenance,
        running=run or [],
    )
