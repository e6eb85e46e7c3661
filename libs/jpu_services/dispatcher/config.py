"""The dispatcher service's settings, taken from the one configuration (SPEC O1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jpu.config import Config, load_config


@dataclass(frozen=True, slots=True)
class DispatcherConfig:
    base: Config  # bus and database URLs, stream, subject prefix, cluster
    cycle_s: float  # upper bound between cycles (D3/D8)
    min_cycle_gap_s: float  # coalescing gap for event-triggered cycles (D8)
    half_life_s: float  # fair-share decay (F3), read for queue order

    @classmethod
    def from_config(cls, config: Config) -> DispatcherConfig:
        return cls(
            base=config,
            cycle_s=config.cycle_s,
            min_cycle_gap_s=config.min_cycle_gap_s,
            half_life_s=config.half_life_s,
        )


def load(env: Mapping[str, str] | None = None) -> DispatcherConfig:
    return DispatcherConfig.from_config(load_config(env=env))
