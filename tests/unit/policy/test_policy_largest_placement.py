"""SPEC Q2's refusal with its fix: the most GPUs one placement could ever give
the job (P3), within its tiers and VRAM, best tier first (T1)."""

from __future__ import annotations

from typing import NamedTuple

from jpu.policy.queue import largest_placement
from jpu.testing.policy_builders import (
    DEFAULT_TIERS,
    RTX3080,
    cluster,
    default_cluster,
    tier,
    tiers,
)


class Want(NamedTuple):
    num_gpus: int
    tiers: frozenset[str] | None = None
    min_vram_gb: int | None = None


def test_Q2_the_largest_placement_of_the_default_cluster_has_2_gpus() -> None:
    got = largest_placement(Want(4), default_cluster(), DEFAULT_TIERS)
    assert got == {"gpus": 2, "node": "gpu-4090x2-01", "tier": "rtx4090"}  # best tier first
    small = largest_placement(Want(4, frozenset({"rtx3080ti"})), default_cluster(), DEFAULT_TIERS)
    assert small == {"gpus": 2, "node": "gpu-3080tix2-01", "tier": "rtx3080ti"}


def test_Q2_capacity_max_gpus_down_gpus_and_inactive_tiers_count() -> None:
    wide = tier("a100", 80, 312.0, 30, max_gpus=4)
    parked = tier("h100", 80, 500.0, 40, active=False)  # T2: no new dispatches
    gpus = cluster(("a", "a100", 8), ("h", "h100", 8), ("s", "rtx3080ti", 2),
                   states={("a", 0): "down"})  # fmt: skip
    all_tiers = tiers(wide, parked, RTX3080)
    assert largest_placement(Want(9), gpus, all_tiers) == {"gpus": 4, "node": "a", "tier": "a100"}
    assert largest_placement(Want(9, None, 100), gpus, all_tiers) is None  # no 100 GB GPU
    assert largest_placement(Want(3, frozenset({"h100"})), gpus, all_tiers) is None
