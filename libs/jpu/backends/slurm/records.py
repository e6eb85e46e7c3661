"""What the Slurm backend remembers of each attempt beyond what slurmctld keeps.

Slurm holds the job itself (found again by its name after an agent restart); this store holds
our side: the account and output directory, the exact time limit, the isolation the job got, and
the escalation of a cancel or timeout (intent + deadlines, written *before* the signal is sent, so
a restarted agent continues it — SPEC X5, O5). One JSON file per attempt, mode 0600 in a 0700
directory under `<data_dir>/slurm-backend/`; the final status is kept so a job slurmctld has
forgotten (MinJobAge) still answers `poll`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import msgspec

from jpu.backends.base import BackendStatus
from jpu.backends.jsonstore import JsonRecordStore

Intent = Literal["cancel", "timeout"]


class SlurmRecord(msgspec.Struct, kw_only=True):
    name: str  # the Slurm job name: jpu-<job_id>-<attempt>
    job_id: str
    attempt: int
    user: str
    account: str
    node: str
    output_dir: str
    isolation: str
    time_limit_s: float | None = None
    slurm_id: int | None = None  # None until sbatch answered
    submitted_at: float = 0.0
    intent: Intent | None = None
    term_at: float | None = None  # when SIGTERM was sent
    kill_at: float | None = None  # when SIGKILL is (or was) due
    killed_at: float | None = None
    kill_failed: bool = False
    final: BackendStatus | None = None


class SlurmRecordStore(JsonRecordStore[SlurmRecord]):
    def __init__(self, root: Path) -> None:
        super().__init__(root, SlurmRecord)

    def key(self, record: SlurmRecord) -> str:
        return record.name

    def note_drained(self, node: str, reason: str) -> None:
        self.set_drained(node, reason)
