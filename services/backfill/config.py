"""The backfill service's settings, taken from the one configuration (SPEC O1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jpu.config import Config, load_config


@dataclass(frozen=True, slots=True)
class BackfillConfig:
    base: Config  # bus and database URLs, stream, subject prefix, cluster
    backfill_enabled: bool  # B: run backfill at all
    backfill_command: str  # what a backfill job runs
    backfill_settle_s: float  # B1: idle time before a GPU is backfilled

    @classmethod
    def from_config(cls, config: Config) -> BackfillConfig:
        return cls(
            base=config,
            backfill_enabled=config.backfill_enabled,
            backfill_command=config.backfill_command,
            backfill_settle_s=config.backfill_settle_s,
        )


def load(env: Mapping[str, str] | None = None) -> BackfillConfig:
    return BackfillConfig.from_config(load_config(env=env))
