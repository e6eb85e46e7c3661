"""The slurm-agent service's settings, taken from the one configuration (SPEC O1)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jpu.config import Config, load_config


@dataclass(frozen=True, slots=True)
class SlurmAgentConfig:
    base: Config  # bus and database URLs, stream, subject prefix, cluster
    slurm_backend: str  # local | slurm (X9)
    cancel_grace_s: float  # X5
    kill_failed_after_s: float  # X5
    max_attempts: int  # X8

    @classmethod
    def from_config(cls, config: Config) -> SlurmAgentConfig:
        return cls(
            base=config,
            slurm_backend=config.slurm_backend,
            cancel_grace_s=config.cancel_grace_s,
            kill_failed_after_s=config.kill_failed_after_s,
            max_attempts=config.max_attempts,
        )


def load(env: Mapping[str, str] | None = None) -> SlurmAgentConfig:
    return SlurmAgentConfig.from_config(load_config(env=env))
