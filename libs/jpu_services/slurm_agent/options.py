"""Tunables of the agent (SPEC X5 grace, watch backoff, inventory period)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jpu.backends import joblogs
from jpu.config import Config


@dataclass(frozen=True)
class AgentOptions:
    durable: str = "slurm-agent"
    cancel_grace_s: float = 30.0  # X5: SIGTERM → SIGKILL
    backfill_grace_s: float = 5.0  # B2: SIGTERM → SIGKILL for backfill on a dispatched GPU
    poll_min_s: float = 0.25  # first poll of a job after it starts or is cancelled
    poll_max_s: float = 5.0  # backoff ceiling (×1.5 per unchanged poll)
    inventory_every_s: float = 30.0  # NodeInventoryObserved when it changed
    output_root: Path = Path(".jpu/outputs")  # JOB_OUTPUT_DIR = <root>/<job_id>/<attempt>

    @classmethod
    def from_config(cls, config: Config, env: Mapping[str, str] | None = None) -> AgentOptions:
        """JPU_AGENT_POLL_MAX_S, JPU_AGENT_OUTPUT_ROOT override what the shared config lacks
        (the output root is the gateway's too: it serves the logs from there)."""
        env = os.environ if env is None else env
        return cls(
            cancel_grace_s=config.cancel_grace_s,
            poll_max_s=float(env.get("JPU_AGENT_POLL_MAX_S", cls.poll_max_s)),
            output_root=joblogs.output_root(config, env),
        )
