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
    # U5: check at submit that the job's account can enter and write its chdir, where this host
    # sees it with the nodes' accounts (jpu_services.gateway.workdir); JPU_GATEWAY_WORKDIR_CHECK=0
    # where it does not
    workdir_check: bool = True
    # U5: this host sees the storage jobs run in as the nodes do, so a `chdir` missing here is
    # missing there (refused at submit); JPU_GATEWAY_SEES_JOB_STORAGE=0 where it does not
    sees_job_storage: bool = True

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
            workdir_check=env.get("JPU_GATEWAY_WORKDIR_CHECK", "1").strip().lower()
            not in {"0", "false", "no"},
            sees_job_storage=env.get("JPU_GATEWAY_SEES_JOB_STORAGE", "1").strip().lower()
            not in {"0", "false", "no"},
        )


def load(env: Mapping[str, str] | None = None) -> GatewayConfig:
    return GatewayConfig.from_config(load_config(env=env), env)
