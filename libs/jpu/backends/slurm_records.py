"""What the Slurm backend remembers of each attempt beyond what slurmctld keeps.

Slurm holds the job itself (found again by its name after an agent restart); this store holds
our side: the account and output directory, the exact time limit, the isolation the job got, and
the escalation of a cancel or timeout (intent + deadlines, written *before* the signal is sent, so
a restarted agent continues it — SPEC X5, O5). One JSON file per attempt, mode 0600 in a 0700
directory under `<data_dir>/slurm-backend/`; the final status is kept so a job slurmctld has
forgotten (MinJobAge) still answers `poll`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

import msgspec

from jpu.backends.base import BackendStatus

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


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(SlurmRecord)


class SlurmRecordStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.jobs = root / "jobs"
        self.jobs.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.chmod(0o700)
        self.jobs.chmod(0o700)

    def save(self, record: SlurmRecord) -> None:
        """Atomic: a crash leaves the old or the new record, never half of one."""
        target = self.jobs / f"{record.name}.json"
        tmp = target.with_suffix(".json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_enc.encode(record))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def forget(self, name: str) -> None:
        (self.jobs / f"{name}.json").unlink(missing_ok=True)

    def all(self) -> list[SlurmRecord]:
        out = []
        for path in sorted(self.jobs.glob("*.json")):
            try:
                out.append(_dec.decode(path.read_bytes()))
            except (OSError, msgspec.DecodeError, msgspec.ValidationError):
                continue
        return out

    def drained(self) -> dict[str, str]:
        """Nodes this backend drained (X5 kill_failed) → reason, for the operator's record."""
        try:
            data = json.loads((self.root / "drained.json").read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()}

    def note_drained(self, node: str, reason: str) -> None:
        drained = self.drained()
        drained[node] = reason
        (self.root / "drained.json").write_text(json.dumps(drained))
