"""The backfill service's tunables and counters, and its one wait primitive."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackfillOptions:
    enabled: bool = True
    command: str = "python -m jpu.tools.backfill_stub"
    settle_s: float = 60.0  # B1
    grace_s: float = 5.0  # SIGTERM → SIGKILL when reclaiming (M2)
    poll_s: float = 0.5  # how often running instances are polled for their end


@dataclass
class BackfillStats:
    rounds: int = 0
    started: int = 0
    ended: int = 0
    conflicts: int = 0
