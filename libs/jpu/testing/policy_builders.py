"""Small builders for policy tests (kueue-style): `cluster(...)`, `job(...)`, `snap(...)`; and
`snapshots()`, random small clusters and queues for the property tests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

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


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LABS = ["A", "B", "C", "D"]


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[Snapshot, float]:
    n_tiers = draw(st.integers(1, 3))
    ts = {}
    for k in range(n_tiers):
        name = f"t{k}"
        ts[name] = tier(
            name,
            draw(st.sampled_from([12, 24, 48])),
            draw(st.sampled_from([10.0, 34.1, 82.6])),
            draw(st.integers(0, 2)),
            max_gpus=draw(st.integers(1, 4)),
            active=draw(st.booleans()) or draw(st.booleans()),
        )
    gpus: list[Gpu] = []
    for n in range(draw(st.integers(1, 5))):
        for t in draw(st.sets(st.sampled_from(sorted(ts)), min_size=1, max_size=2)):
            for i in range(draw(st.integers(1, 4))):
                s = draw(st.sampled_from(["free", "free", "free", "job:r", "backfill:b", "down"]))
                s = f"{s}{n}{t}{i}" if s in ("job:r", "backfill:b") else s
                gpus.append(Gpu(f"n{n}", t, i, s))
    now = 1000.0
    queue: list[QueuedJob] = []
    for k in range(draw(st.integers(0, 10))):
        tf = draw(st.none() | st.sets(st.sampled_from([*sorted(ts), "zz"]), min_size=1))
        queue.append(
            QueuedJob(
                job_id=f"j{k}",
                lab=draw(st.sampled_from(LABS)),
                user="u",
                num_gpus=draw(st.integers(1, 4)),
                queue_entered_at=float(draw(st.integers(0, 5))),
                tiers=frozenset(tf) if tf is not None else None,
                min_vram_gb=draw(st.none() | st.sampled_from([12, 24, 40])),
                attempt=draw(st.integers(1, 3)),
            )
        )
    # reservations on free GPUs, one placement each (R2); sometimes a GPU goes down afterwards
    for k in range(min(len(queue), draw(st.integers(0, 2)))):
        free = [g for g in gpus if g.state == "free"]
        if not free:
            break
        g0 = draw(st.sampled_from(free))
        same = [g for g in free if (g.node, g.tier) == (g0.node, g0.tier)]
        take = same[: draw(st.integers(1, len(same)))]
        j = queue[k]
        idx = tuple(g.index for g in take)
        since = draw(st.sampled_from([0.0, 400.0, 990.0]))
        # GPUs join the reservation over time, never after `now`
        joined = (
            tuple(min(since + 5 * i, now) for i in range(len(idx))) if draw(st.booleans()) else ()
        )
        queue[k] = QueuedJob(
            job_id=j.job_id,
            lab=j.lab,
            user=j.user,
            num_gpus=max(j.num_gpus, len(idx) + 1),
            queue_entered_at=j.queue_entered_at,
            tiers=None,
            min_vram_gb=None,
            reservation=Reservation(g0.node, g0.tier, idx, since, joined),
        )
        bf = draw(st.none() | st.just(f"bfres{k}"))
        down = draw(st.booleans()) and draw(st.booleans())
        gpus = [
            (
                Gpu(g.node, g.tier, g.index, "down" if down else f"reserved:{j.job_id}", bf)
                if g in take
                else g
            )
            for g in gpus
        ]
    usage = {
        lab: LabUsage(
            float(draw(st.sampled_from([0, 100, 250, 1000]))), draw(st.sampled_from([0.0, 900.0]))
        )
        for lab in draw(st.sets(st.sampled_from(LABS)))
    }
    normal: list[MaintenanceState] = ["NORMAL"]
    others: list[MaintenanceState] = ["DRAINING", "ACTIVE"]
    modes = normal * 8 + others
    maint = draw(st.sampled_from(modes))
    draw(st.randoms()).shuffle(queue)
    snap = Snapshot(
        tiers=ts, gpus=gpus, queue=queue, usage=usage, half_life_s=3600.0, maintenance=maint
    )
    return snap, now
