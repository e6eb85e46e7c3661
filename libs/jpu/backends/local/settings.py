"""The local backend's settings (SPEC X9), in a module of their own: the backend and its parts
(the process watcher, the backfill processes) read them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

from jpu.backends.settings import BackendSettings
from jpu.config import Node
from jpu.policy.workdir import DEFAULT_ROOTS


@dataclass(frozen=True)
class LocalSettings(BackendSettings):
    nodes: list[Node]
    adopted_poll_s: float = 0.25  # /proc check period for jobs that are not our children
    workdir_roots: tuple[str, ...] = DEFAULT_ROOTS  # SEC1: where a job's chdir may lie
