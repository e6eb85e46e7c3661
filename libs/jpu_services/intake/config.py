"""The intake service's settings, taken from the one configuration (SPEC O1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jpu.config import Config, load_config


@dataclass(frozen=True, slots=True)
class IntakeConfig:
    base: Config  # bus and database URLs, stream, subject prefix, cluster
    max_active_jobs: int  # default concurrency slots per user (S1/Q5)

    @classmethod
    def from_config(cls, config: Config) -> IntakeConfig:
        return cls(
            base=config,
            max_active_jobs=config.max_active_jobs,
        )


def load(env: Mapping[str, str] | None = None) -> IntakeConfig:
    return IntakeConfig.from_config(load_config(env=env))
