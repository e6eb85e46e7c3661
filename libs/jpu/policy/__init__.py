"""The pure policy core: fair-share, placements, the dispatch cycle and its baselines, the queue,
OOM escalation, maintenance and backfill. No I/O, no clock: `now` is always passed in.
"""

from collections.abc import Callable

from jpu.policy.baselines import fifo_cycle, slurm_like_cycle
from jpu.policy.cycle import cycle
from jpu.policy.fairshare import attempt_cost, charge, cost, decayed
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import CycleResult, Snapshot
from jpu.policy.pending import Pending
from jpu.policy.placements import Placement, ever_fits, fits, placements

Policy = Callable[[Snapshot, float], CycleResult]
POLICIES: dict[str, Policy] = {"jpu": cycle, "fifo": fifo_cycle, "slurm-like": slurm_like_cycle}

__all__ = [
    "POLICIES",
    "LabQueues",
    "Pending",
    "Placement",
    "Policy",
    "attempt_cost",
    "charge",
    "cost",
    "cycle",
    "decayed",
    "ever_fits",
    "fifo_cycle",
    "fits",
    "placements",
    "slurm_like_cycle",
]
