"""A deliberately naive, obviously-literal reading of SPEC D3 (O(queue × placements)).

The optimised `jpu.policy.cycle` must decide exactly what this decides; property tests compare
them on random clusters and queues.
"""

from __future__ import annotations

import msgspec

from jpu.policy.fairshare import decayed
from jpu.policy.model import (
    CycleResult,
    Dispatch,
    LabUsage,
    PendingReason,
    QueuedJob,
    ReleaseReason,
    ReservationGrow,
    ReservationRelease,
    ReservationStart,
    Snapshot,
)


class P:
    def __init__(self) -> None:
        self.cap = 0
        self.idle: set[int] = set()
        self.bf: dict[int, str] = {}
        self.state_res: dict[str, set[int]] = {}


def ref_cycle(s: Snapshot, now: float) -> CycleResult:
    T = s.tiers
    u = {j.lab: decayed(s.usage.get(j.lab, LabUsage()), now, s.half_life_s) for j in s.queue}
    order = sorted(s.queue, key=lambda j: (u[j.lab], j.queue_entered_at, j.job_id))
    out = CycleResult(order=[j.job_id for j in order])
    P_: dict[tuple[str, str], P] = {}
    p: P | None
    for g in s.gpus:
        if g.tier not in T:
            continue
        p = P_.setdefault((g.node, g.tier), P())
        if g.state == "down":
            continue
        p.cap += 1
        kind, _, ref = g.state.partition(":")
        if g.state == "free":
            p.idle.add(g.index)
        elif kind == "backfill":
            p.idle.add(g.index)
            p.bf[g.index] = ref
        elif kind == "reserved":
            p.state_res.setdefault(ref, set()).add(g.index)
            if g.backfill:
                p.bf[g.index] = g.backfill
    holders = [j for j in order if j.reservation is not None]
    mine: dict[str, set[int]] = {}
    lost: dict[str, bool] = {}
    for j in holders:
        r = j.reservation
        assert r is not None  # a holder
        p = P_.get((r.node, r.tier))
        if p is None:
            mine[j.job_id], lost[j.job_id] = set(), True
            continue
        st = p.state_res.get(j.job_id, set())
        alive = {g for g in r.gpus if g in p.idle or g in st}
        lost[j.job_id] = len(alive) < len(r.gpus)
        p.idle -= set(r.gpus)
        mine[j.job_id] = st | alive

    def rel(j: QueuedJob, reason: ReleaseReason, charged: bool) -> None:
        r = j.reservation
        assert r is not None  # only holders are released
        held = sum(now - t for t in r.joined) if r.joined else len(r.gpus) * (now - r.since)
        t = T.get(r.tier)
        out.releases.append(
            ReservationRelease(
                job_id=j.job_id,
                lab=j.lab,
                node=r.node,
                tier=r.tier,
                gpus=r.gpus,
                reason=reason,
                gpu_seconds=held,
                charge_now=held * t.tflops if charged and t else 0.0,
                held_cost=held * t.tflops if t else 0.0,
            )
        )

    if s.maintenance != "NORMAL":
        for j in holders:
            rel(j, "maintenance", True)
        out.pending = {j.job_id: "Maintenance" for j in order}
        return out

    def admits(j: QueuedJob, tn: str) -> bool:
        t = T[tn]
        return (
            t.active
            and j.num_gpus <= t.max_gpus
            and (j.tiers is None or tn in j.tiers)
            and (j.min_vram_gb is None or t.vram_gb >= j.min_vram_gb)
        )

    def fit(j: QueuedJob, k: tuple[str, str]) -> bool:
        return admits(j, k[1]) and j.num_gpus <= P_[k].cap

    kept = None
    for j in holders:
        r = j.reservation
        assert r is not None  # a holder
        k = (r.node, r.tier)
        p = P_.get(k)
        gone = p is None or r.tier not in T or lost[j.job_id] or p.cap < j.num_gpus
        if gone or not admits(j, r.tier):
            rel(j, "capacity", True)
        elif j is not order[0]:
            rel(j, "demoted", True)
        else:
            kept = (j, k, sorted(mine[j.job_id]))
            continue
        if p is not None:
            p.idle |= mine[j.job_id]

    base = {k: len(p.idle) for k, p in P_.items()}
    if kept:
        base[kept[1]] += len(kept[2])

    def take(k: tuple[str, str], n: int) -> list[int]:
        p = P_[k]
        got = sorted(p.idle, key=lambda i: (i in p.bf, i))[:n]
        p.idle -= set(got)
        return got

    def disp(j: QueuedJob, k: tuple[str, str], gpus: list[int]) -> None:
        g = tuple(sorted(gpus))
        bf = P_[k].bf
        out.dispatches.append(
            Dispatch(
                job_id=j.job_id,
                lab=j.lab,
                node=k[0],
                tier=k[1],
                gpus=g,
                attempt=j.attempt,
                preempt_backfill=tuple(bf[i] for i in g if i in bf),
            )
        )

    def d4(k: tuple[str, str]) -> tuple:
        return (-T[k[1]].sort_order, len(P_[k].idle), k[0], k[1])

    pending: dict[str, PendingReason] = {}
    for rank, j in enumerate(order):
        n = j.num_gpus
        if rank == 0 and kept:
            _, own, held = kept
            need = max(0, n - len(held))
            if len(P_[own].idle) >= need:
                rel(j, "dispatched", False)
                disp(j, own, held + take(own, need))
                continue
            c = [k for k in P_ if fit(j, k) and len(P_[k].idle) >= n]
            if c:
                rel(j, "swap", False)
                best = min(c, key=d4)
                disp(j, best, take(best, n))
                P_[own].idle |= set(held)
                continue
            if P_[own].idle:
                added = tuple(take(own, need))
                out.grows.append(
                    ReservationGrow(
                        job_id=j.job_id, node=own[0], tier=own[1], gpus=(*held, *added), added=added
                    )
                )
            pending[j.job_id] = "Reservation"
            continue
        c = [k for k in P_ if fit(j, k) and len(P_[k].idle) >= n]
        if c:
            best = min(c, key=d4)
            disp(j, best, take(best, n))
            continue
        if rank == 0 and n >= 2:
            c = [k for k in P_ if fit(j, k) and P_[k].idle]
            if c:
                best = min(c, key=lambda k: (-T[k[1]].sort_order, -len(P_[k].idle), k[0], k[1]))
                out.starts.append(
                    ReservationStart(
                        job_id=j.job_id, node=best[0], tier=best[1], gpus=tuple(take(best, n))
                    )
                )
                pending[j.job_id] = "Reservation"
                continue
        prio = any(fit(j, k) and base[k] >= n for k in P_)
        pending[j.job_id] = "Priority" if prio else "Resources"
        v = j.min_vram_gb
        if not prio and v is not None:  # D7: only GPUs below its VRAM floor are free enough
            floor = msgspec.structs.replace(j, min_vram_gb=None)
            if any(fit(floor, k) and T[k[1]].vram_gb < v and base[k] >= n for k in P_):
                pending[j.job_id] = "MinVram"
    out.pending = pending
    return out
