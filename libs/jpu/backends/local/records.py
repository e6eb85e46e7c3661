"""What the local backend remembers of each attempt, persisted so a restarted agent re-adopts.

One JSON file per backend job under `<data_dir>/local-backend/jobs/` (mode 0700, root's when
the agent is root). Intents (cancel, timeout) and their deadlines are written *before* the
signal is sent, so a restart in the middle of a cancel continues the escalation (SPEC X5, O5).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from jpu.backends.base import BackendStatus
from jpu.backends.jsonstore import JsonRecordStore
from jpu.backends.process import clear_status

Intent = Literal["cancel", "timeout"]


class JobRecord(msgspec.Struct, kw_only=True):
    backend_job_id: str
    job_id: str
    attempt: int
    user: str
    account: str
    node: str
    tier: str
    gpus: list[int]
    output_dir: str
    isolation: str
    container: str = ""  # X4a: the attempt's podman container (its name), when it has one
    podman: list[str] = []  # ... and the podman command that manages it (`podman [--root D]`)
    time_limit_s: float | None = None
    pid: int = 0
    ticks: int = 0  # process start time in clock ticks: pid + ticks identify the process
    started_at: float = 0.0
    intent: Intent | None = None
    term_at: float | None = None  # when SIGTERM was sent
    kill_at: float | None = None  # when SIGKILL is (or was) due
    killed_at: float | None = None
    final: BackendStatus | None = None


class RecordStore(JsonRecordStore[JobRecord]):
    def __init__(self, root: Path) -> None:
        super().__init__(root, JobRecord)

    def key(self, record: JobRecord) -> str:
        return record.backend_job_id

    def status_file(self, backend_job_id: str) -> Path:
        return self.jobs / f"{backend_job_id}.status"

    def saved_at(self, backend_job_id: str) -> float:
        """When the record was last written (0 if it is gone)."""
        try:
            return self.path(backend_job_id).stat().st_mtime
        except FileNotFoundError:
            return 0.0

    def forget(self, backend_job_id: str) -> None:
        super().forget(backend_job_id)
        clear_status(self.status_file(backend_job_id))
