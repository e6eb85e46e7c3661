"""The slurm-agent service's settings, taken from the one configuration (SPEC O1).

Everything the agent needs is in the shared `Config`: the backend and its settings
(`slurm_backend`, `cancel_grace_s`, `kill_failed_after_s`, isolation: `jpu.backends.make_backend`)
and the bus (`jpu.runtime.service`); no second copy of those keys is kept here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from jpu.config import Config, load_config


@dataclass(frozen=True, slots=True)
class SlurmAgentConfig:
    base: Config  # bus and database URLs, stream, subject prefix, cluster, backend

    @classmethod
    def from_config(cls, config: Config) -> SlurmAgentConfig:
        return cls(base=config)


def load(env: Mapping[str, str] | None = None) -> SlurmAgentConfig:
    return SlurmAgentConfig.from_config(load_config(env=env))
