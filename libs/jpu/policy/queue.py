"""The two-level queue (SPEC Q2, Q4, Q5, S1, S2): promotion and the no-fit fix. Pure.

Q1's validation of a submit is the domain's (jpu.domain.validation): the policy core reads no
domain module, so the domain can build on it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from jpu.config import Tier
from jpu.policy.model import Gpu
from jpu.policy.placements import Request, scan, tier_admits


def promotions(
    personal: Mapping[str, Sequence[str]],
    slot_holding: Mapping[str, int],
    limits: Mapping[str, int],
    default_limit: int,
) -> list[str]:
    """SPEC Q5: per user, the oldest personal-queue jobs that fit under `max_active_jobs`.

    `personal[user]` is in submission order. Users are visited by name for a stable output.
    """
    out: list[str] = []
    for user in sorted(personal):
        free = limits.get(user, default_limit) - slot_holding.get(user, 0)
        if free > 0:
            out.extend(personal[user][:free])
    return out


class _AnyCount(NamedTuple):
    num_gpus: int
    tiers: Collection[str] | None
    min_vram_gb: int | None


def largest_placement(
    job: Request, gpus: Iterable[Gpu], tiers: Mapping[str, Tier]
) -> dict[str, Any] | None:
    """For a Q2 refusal, the fix: the most GPUs one placement could ever give this job
    (`min(capacity, tier.max_gpus)` over the active placements its `tiers` and `min_vram_gb`
    allow, P3), as `{"gpus", "node", "tier"}` (best tier first, T1); None when no placement
    matches its tiers and VRAM at all."""
    probe = _AnyCount(1, job.tiers, job.min_vram_gb)
    best: tuple[int, int, str, str] | None = None
    for slot in scan(gpus, tiers).values():
        tier = tiers[slot.tier]
        if slot.capacity < 1 or not tier_admits(probe, tier):
            continue
        key = (min(slot.capacity, tier.max_gpus), tier.sort_order, slot.node, slot.tier)
        if best is None or key[:2] > best[:2]:
            best = key
    if best is None:
        return None
    return {"gpus": best[0], "node": best[2], "tier": best[3]}
