"""The gateway's settings, taken from the one configuration (SPEC O1)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jpu.backends import joblogs
from jpu.config import Config, load_config


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    base: Config  # bus and database URLs, stream, tiers, default max_active_jobs
    host: str
    port: int
    # The jobs / maintenance / gpu_resources / backfill projections run inside the gateway (one
    # `projector` role); JPU_GATEWAY_PROJECTOR=0 turns it off on extra replicas.
    projector: bool = True
    readiness_timeout_s: float = 2.0
    # where the agent writes every JOB_OUTPUT_DIR (X2): GET /v1/jobs/{id}/logs reads there
    output_root: Path = field(default_factory=lambda: Path(".jpu/outputs").absolute())

    @classmethod
    def from_config(cls, config: Config, env: Mapping[str, str] | None = None) -> GatewayConfig:
        env = os.environ if env is None else env
        flag = env.get("JPU_GATEWAY_PROJECTOR", "1").strip().lower()
        projector = flag not in {"0", "false", "no"}
        return cls(
            base=config,
            host=config.gateway_host,
            port=config.gateway_port,
            projector=projector,
            output_root=joblogs.output_root(config, env),
        )


def load(env: Mapping[str, str] | None = None) -> GatewayConfig:
    return GatewayConfig.from_config(load_config(env=env), env)
