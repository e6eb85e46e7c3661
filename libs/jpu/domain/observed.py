"""What an execution backend reports, as the domain reads it (SPEC X9): a job's status (the
end state, exit code and output tail that X6/X7 decide from) and a node's inventory (P2).

Plain values: the backends (jpu.backends) produce them, the pure domain decides from them, so they
live here rather than beside the backends' processes and files.
"""

from __future__ import annotations

from typing import Literal

import msgspec

BackendState = Literal[
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "TIMEOUT",
    "CANCELLED",
    "NODE_FAIL",
    "PREEMPTED",
    "OUT_OF_MEMORY",
]
TERMINAL_STATES: frozenset[str] = frozenset(
    {"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"}
)


class BackendStatus(msgspec.Struct, frozen=True, kw_only=True):
    state: BackendState
    exit_code: int | None = None  # None while running, or when killed by a signal
    started_at: float | None = None  # wall-clock seconds
    ended_at: float | None = None
    signal: int | None = None  # the signal that ended the job, when one did
    kill_failed: bool = False  # X5: still alive after SIGKILL + kill_failed_after_s
    cancelled_by_us: bool = False  # CANCELLED because `cancel` was called
    node: str | None = None
    output_tail: str = ""  # last bytes of stdout + stderr, for the OOM verdict (X7)
    isolation: str = "none"  # X4: what the job actually got ("netns", "none", "apptainer")
    reason: str | None = None  # backend-specific detail (e.g. Slurm's Reason)

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class NodeInventory(msgspec.Struct, frozen=True, kw_only=True):
    """What the backend sees of one node (becomes NodeInventoryObserved)."""

    node: str
    gpus: dict[str, int]  # tier -> GPU count
    down: dict[str, list[int]] = msgspec.field(default_factory=dict)
    state: str = "up"  # up | drain | down
    reason: str | None = None
