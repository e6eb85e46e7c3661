"""The local backend's settings (SPEC X9), in a module of their own: the backend and its parts
(the process watcher, the backfill processes) read them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from jpu.backends import isolation as iso_
from jpu.backends.workspaces import PipSite
from jpu.config import Node
from jpu.policy.workdir import DEFAULT_ROOTS


@dataclass(frozen=True)
class LocalSettings:
    data_dir: Path
    nodes: list[Node]
    timeout_grace_s: float = 30.0  # SIGTERM → SIGKILL when a time limit is hit (like KillWait)
    kill_failed_after_s: float = 300.0  # X5
    isolation: str = "auto"  # X4: container | uid-netns | none | auto | apptainer (isolation.py)
    apptainer: iso_.Apptainer | None = None  # set: Apptainer is configured
    container_runtime: str = "podman"  # X4a: for isolation: container
    podman: iso_.Podman = field(default_factory=lambda: iso_.Podman(iso_.BASE_IMAGE))
    pip: PipSite = field(default_factory=PipSite)  # X4a: what a workspace build passes to pip
    account_template: str = "jpu-{user}"
    create_accounts: bool = True
    fallback_account: str = "nobody"
    adopted_poll_s: float = 0.25  # /proc check period for jobs that are not our children
    workdir_roots: tuple[str, ...] = DEFAULT_ROOTS  # SEC1: where a job's chdir may lie
    tail_bytes: int = 16 * 1024
