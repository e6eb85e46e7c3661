"""GPU OOM verdict and escalation (SPEC X7, X8). Pure."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Literal

import msgspec

from jpu.config import Tier
from jpu.policy.model import Gpu
from jpu.policy.placements import ever_fits

# X7: CUDA OOM markers. Host RAM OOM (Slurm `OUT_OF_MEMORY`) matches none of them on purpose.
GPU_OOM_MARKERS: tuple[str, ...] = (
    "CUDA out of memory",
    "OutOfMemoryError",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "cudaErrorMemoryAllocation",
)


def is_gpu_oom(failed: bool, output: str) -> bool:
    """SPEC X7. `RESOURCE_EXHAUSTED` counts only with "out of memory" (any case, as XLA writes
    "Out of memory"); on its own it can be any exhausted quota."""
    if not failed:
        return False
    if any(m in output for m in GPU_OOM_MARKERS):
        return True
    return "RESOURCE_EXHAUSTED" in output and "out of memory" in output.lower()


class Retry(msgspec.Struct, frozen=True):
    attempt: int
    min_vram_gb: int


class Fail(msgspec.Struct, frozen=True):
    why: Literal["max_attempts", "no_fit"]
    needed_vram_gb: int
    reason: Literal["OOM"] = "OOM"


class _Want(msgspec.Struct, frozen=True):
    num_gpus: int
    tiers: Collection[str] | None
    min_vram_gb: int | None


def escalate(
    attempt: int,
    tier_vram_gb: int,
    gpus: Iterable[Gpu],
    tiers: Mapping[str, Tier],
    num_gpus: int,
    job_tiers: Collection[str] | None,
    max_attempts: int,
) -> Retry | Fail:
    """SPEC X8: after a GPU OOM on a tier with `vram_gb = v`, retry needing more than v GB, or fail
    with reason OOM when attempts run out or no active placement could ever fit the retry."""
    needed = tier_vram_gb + 1
    want = _Want(num_gpus=num_gpus, tiers=job_tiers, min_vram_gb=needed)
    if attempt + 1 > max_attempts:
        return Fail("max_attempts", needed)
    if not ever_fits(want, gpus, tiers):
        return Fail("no_fit", needed)
    return Retry(attempt=attempt + 1, min_vram_gb=needed)
