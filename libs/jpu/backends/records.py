"""What the local backend remembers of each attempt, persisted so a restarted agent re-adopts.

One JSON file per backend job under `<data_dir>/local-backend/jobs/` (mode 0700, root's when
the agent is root). Intents (cancel, timeout) and their deadlines are written *before* the
signal is sent, so a restart in the middle of a cancel continues the escalation (SPEC X5, O5).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Literal

import msgspec

from jpu.backends.base import BackendStatus

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
    time_limit_s: float | None = None
    pid: int = 0
    ticks: int = 0  # process start time in clock ticks: pid + ticks identify the process
    started_at: float = 0.0
    intent: Intent | None = None
    term_at: float | None = None  # when SIGTERM was sent
    kill_at: float | None = None  # when SIGKILL is (or was) due
    killed_at: float | None = None
    final: BackendStatus | None = None


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(JobRecord)


class RecordStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.jobs = root / "jobs"
        self.jobs.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.chmod(0o700)
        self.jobs.chmod(0o700)

    def path(self, backend_job_id: str) -> Path:
        return self.jobs / f"{backend_job_id}.json"

    def status_file(self, backend_job_id: str) -> Path:
        return self.jobs / f"{backend_job_id}.status"

    def save(self, record: JobRecord) -> None:
        """Atomic: a crash leaves the old or the new record, never half of one."""
        target = self.path(record.backend_job_id)
        tmp = target.with_suffix(".json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_enc.encode(record))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def load(self, backend_job_id: str) -> JobRecord | None:
        try:
            return _dec.decode(self.path(backend_job_id).read_bytes())
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None

    def all(self) -> list[JobRecord]:
        out = []
        for p in sorted(self.jobs.glob("*.json")):
            rec = self.load(p.stem)
            if rec is not None:
                out.append(rec)
        return out

    def forget(self, backend_job_id: str) -> None:
        for p in (self.path(backend_job_id), self.status_file(backend_job_id)):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def drained(self) -> dict[str, str]:
        """Nodes drained by the backend (X5 kill_failed) → reason; survives restarts."""
        try:
            data = json.loads((self.root / "drained.json").read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()}

    def set_drained(self, node: str, reason: str | None) -> None:
        drained = self.drained()
        if reason is None:
            drained.pop(node, None)
        else:
            drained[node] = reason
        (self.root / "drained.json").write_text(json.dumps(drained))
