"""Placements (SPEC P1–P3) and fit (SPEC D2, Q2).

A placement is not stored: it is `gpu_resources GROUP BY (node, tier)` (P1). `capacity` counts the
GPUs that are not `down`; `idle` the GPUs that are `free` or `backfill:*` and not reserved (P2).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

import msgspec

from jpu.config import Tier
from jpu.policy.model import Gpu


class Request(Protocol):
    """What fit needs of a job (a QueuedJob, or a submit request before it is queued)."""

    @property
    def num_gpus(self) -> int: ...
    @property
    def tiers(self) -> Collection[str] | None: ...
    @property
    def min_vram_gb(self) -> int | None: ...


class Placement(msgspec.Struct, frozen=True, kw_only=True):
    node: str
    tier: str
    capacity: int  # GPUs not `down` (P2)
    idle: tuple[int, ...]  # free or backfill, not reserved (P2, B4)
    reserved_by: dict[str, tuple[int, ...]] = {}  # job id -> GPU indices it holds (R2)
    backfill: dict[int, str] = {}  # GPU index -> backfill id running on it (B1, R2)
    running: tuple[str, ...] = ()  # job ids holding GPUs here

    @property
    def idle_count(self) -> int:
        return len(self.idle)


class Slot:
    """Mutable placement state for one computation (the cycle takes GPUs from it)."""

    __slots__ = ("backfill", "capacity", "idle", "node", "reserved", "running", "tier")

    def __init__(self, node: str, tier: str) -> None:
        self.node = node
        self.tier = tier
        self.capacity = 0
        self.idle: list[int] = []
        self.backfill: dict[int, str] = {}
        self.reserved: dict[str, list[int]] = {}
        self.running: dict[str, None] = {}  # ordered set

    def freeze(self) -> Placement:
        return Placement(
            node=self.node,
            tier=self.tier,
            capacity=self.capacity,
            idle=tuple(sorted(self.idle)),
            reserved_by={j: tuple(sorted(g)) for j, g in self.reserved.items()},
            backfill=dict(self.backfill),
            running=tuple(self.running),
        )


def scan(
    gpus: Iterable[Gpu], tiers: Mapping[str, Tier], *, running: bool = False
) -> dict[tuple[str, str], Slot]:
    """One pass over `gpu_resources` into slots keyed by (node, tier) (P1, P2).

    GPUs of a tier missing from the configuration are ignored: nothing can be placed there.
    An unknown state is treated as busy (never handed out). Running job ids are collected only
    when asked (`running=True`): the cycle does not need them. Rows usually come grouped by
    node, so the slot of the previous row is reused without a lookup.
    """
    slots: dict[tuple[str, str], Slot] = {}
    last: tuple[str, str] = ("", "")
    s: Slot | None = None
    for g in gpus:
        if g.node != last[0] or g.tier != last[1]:
            last = (g.node, g.tier)
            s = slots.get(last)
            if s is None and g.tier in tiers:
                s = slots[last] = Slot(g.node, g.tier)
        if s is None:
            continue
        st = g.state
        if st == "down":
            continue
        s.capacity += 1
        head = st[:1]  # one character: a cached string, no new one per row
        if head == "j":  # job:<id> — the common case on a busy cluster
            if running and st[:2] == "jo":
                s.running[st[4:]] = None
        elif st == "free":
            s.idle.append(g.index)
        elif head == "b" and st.startswith("backfill:"):
            s.idle.append(g.index)  # backfill always yields (P2, B4)
            s.backfill[g.index] = st[9:]
        elif head == "r" and st.startswith("reserved:"):
            s.reserved.setdefault(st[9:], []).append(g.index)
            if g.backfill:
                s.backfill[g.index] = g.backfill  # R2: backfill may keep running
    return slots


def placements(gpus: Iterable[Gpu], tiers: Mapping[str, Tier]) -> list[Placement]:
    """The placements of the pool, ordered by (node, tier)."""
    slots = scan(gpus, tiers, running=True)
    return [slots[k].freeze() for k in sorted(slots)]


def tier_admits(job: Request, tier: Tier) -> bool:
    """The tier-level part of D2: active (T2), allowed by `tiers`, enough VRAM, ≤ max_gpus."""
    return (
        tier.active
        and job.num_gpus <= tier.max_gpus
        and (job.tiers is None or tier.name in job.tiers)
        and (job.min_vram_gb is None or tier.vram_gb >= job.min_vram_gb)
    )


def fits(job: Request, placement: Placement | Slot, tier: Tier) -> bool:
    """SPEC D2: the placement could run the job if it were empty."""
    return tier_admits(job, tier) and job.num_gpus <= placement.capacity


def ever_fits(job: Request, gpus: Iterable[Gpu], tiers: Mapping[str, Tier]) -> bool:
    """SPEC Q2: some active placement can run the job, ignoring current load."""
    return any(fits(job, s, tiers[s.tier]) for s in scan(gpus, tiers).values())
