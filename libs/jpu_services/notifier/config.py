"""The notifier's settings, taken from the one configuration (SPEC O1, Q10).

`JPU_NOTIFY_POLL_S` (how often due retries are looked for, default 0.5) tunes what the shared
config lacks; everything else is `console_url`, `smtp_*` and `notify_*` there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from jpu.config import Config, load_config


@dataclass(frozen=True, slots=True)
class NotifierConfig:
    base: Config  # bus and database URLs, stream, subject prefix
    console_url: str  # where the job links point (SPEC U2)
    smtp_host: str  # "": e-mail is not configured
    smtp_port: int
    smtp_from: str
    smtp_user: str
    smtp_password: str
    smtp_starttls: bool
    retry_base_s: float
    retry_max_s: float
    max_attempts: int
    poll_s: float = 0.5
    send_timeout_s: float = 10.0  # one try; a hung receiver holds only its own notification
    webhook_allow_networks: tuple[str, ...] = ()  # SEC4: CIDRs a webhook may reach anyway

    @classmethod
    def from_config(cls, config: Config, env: Mapping[str, str] | None = None) -> NotifierConfig:
        env = os.environ if env is None else env
        console = config.console_url or f"http://{config.gateway_host}:{config.gateway_port}"
        return cls(
            base=config,
            console_url=console,
            smtp_host=config.smtp_host,
            smtp_port=config.smtp_port,
            smtp_from=config.smtp_from,
            smtp_user=config.smtp_user,
            smtp_password=config.smtp_password,
            smtp_starttls=config.smtp_starttls,
            retry_base_s=config.notify_retry_base_s,
            retry_max_s=config.notify_retry_max_s,
            max_attempts=config.notify_max_attempts,
            poll_s=float(env.get("JPU_NOTIFY_POLL_S", "0.5")),
            webhook_allow_networks=tuple(config.webhook_allow_networks),
        )


def load(env: Mapping[str, str] | None = None) -> NotifierConfig:
    return NotifierConfig.from_config(load_config(env=env), env)
