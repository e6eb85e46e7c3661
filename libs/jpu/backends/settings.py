"""What both backends' settings hold (SPEC X4, X4a, X5, X9): one definition, so a field the
local and the Slurm backend share cannot drift apart; each backend adds its own in
`backends/<name>/settings.py`. Every field after `data_dir` is keyword-only: a backend's own
fields keep their positions (`SlurmSettings(data_dir, conf)`)."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from jpu.backends import isolation as iso_
from jpu.backends.accounts import AccountMap
from jpu.backends.workspaces import PipSite


@dataclass(frozen=True)
class BackendSettings:
    data_dir: Path
    _: KW_ONLY
    timeout_grace_s: float = 30.0  # SIGTERM → SIGKILL when a time limit is hit (like KillWait)
    kill_failed_after_s: float = 300.0  # X5
    isolation: str = "auto"  # X4: which ones a backend offers is in isolation.py
    apptainer: iso_.Apptainer | None = None  # set: Apptainer is configured
    container_runtime: str = "podman"  # X4a: for isolation: container
    podman: iso_.Podman = field(default_factory=lambda: iso_.Podman(iso_.BASE_IMAGE))
    pip: PipSite = field(default_factory=PipSite)  # X4a: what a workspace build passes to pip
    account_template: str = "jpu-{user}"  # X4: platform user → Unix account (accounts.py)
    create_accounts: bool = True
    fallback_account: str = "nobody"
    tail_bytes: int = 16 * 1024

    def account_map(self) -> AccountMap:
        """X4: who a job runs as (the gateway builds the same map: `backends.account_map`)."""
        return AccountMap(self.account_template, self.create_accounts, self.fallback_account)
