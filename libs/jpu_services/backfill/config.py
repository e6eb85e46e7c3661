"""The backfill service's settings, taken from the one configuration (SPEC O1).

`JPU_BACKFILL_GRACE_S` (SIGTERM → SIGKILL on reclaim, default 5) and `JPU_BACKFILL_POLL_S` (how
often instances are polled for their end, default 0.5) tune what the shared config lacks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from jpu.config import Config, load_config
from jpu_services.backfill.options import BackfillOptions


@dataclass(frozen=True, slots=True)
class BackfillConfig:
    base: Config  # bus and database URLs, stream, subject prefix, cluster
    backfill_enabled: bool  # B: run backfill at all
    backfill_command: str  # what a backfill job runs
    backfill_settle_s: float  # B1: idle time before a GPU is backfilled
    grace_s: float = 5.0
    poll_s: float = 0.5

    @classmethod
    def from_config(cls, config: Config, env: Mapping[str, str] | None = None) -> BackfillConfig:
        env = os.environ if env is None else env
        return cls(
            base=config,
            backfill_enabled=config.backfill_enabled,
            backfill_command=config.backfill_command,
            backfill_settle_s=config.backfill_settle_s,
            grace_s=float(env.get("JPU_BACKFILL_GRACE_S", "5")),
            poll_s=float(env.get("JPU_BACKFILL_POLL_S", "0.5")),
        )

    def options(self) -> BackfillOptions:
        return BackfillOptions(
            enabled=self.backfill_enabled,
            command=self.backfill_command,
            settle_s=self.backfill_settle_s,
            grace_s=self.grace_s,
            poll_s=self.poll_s,
        )


def load(env: Mapping[str, str] | None = None) -> BackfillConfig:
    return BackfillConfig.from_config(load_config(env=env), env)
