"""The accounting service's settings, taken from the one configuration (SPEC O1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jpu.config import Config, load_config


@dataclass(frozen=True, slots=True)
class AccountingConfig:
    base: Config  # bus and database URLs, stream, subject prefix, cluster
    half_life_s: float  # fair-share decay (F3)

    @classmethod
    def from_config(cls, config: Config) -> AccountingConfig:
        return cls(
            base=config,
            half_life_s=config.half_life_s,
        )


def load(env: Mapping[str, str] | None = None) -> AccountingConfig:
    return AccountingConfig.from_config(load_config(env=env))
