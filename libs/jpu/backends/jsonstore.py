"""Per-attempt records a backend keeps on disk so a restarted agent carries on (SPEC X5, O5).

One JSON file per record under `<root>/jobs/` (directories 0700, files 0600, root's when the agent
is root), written atomically with fsync; plus the nodes the backend drained (X5 kill_failed).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

R = TypeVar("R", bound=msgspec.Struct)


class JsonRecordStore(Generic[R]):
    """Records of type `record_type`, each in `<root>/jobs/<key>.json`."""

    def __init__(self, root: Path, record_type: type[R]) -> None:
        self.root = root
        self.jobs = root / "jobs"
        self.jobs.mkdir(mode=0o700, parents=True, exist_ok=True)
        root.chmod(0o700)
        self.jobs.chmod(0o700)
        self._enc = msgspec.json.Encoder()
        self._dec = msgspec.json.Decoder(record_type)

    def key(self, record: R) -> str:
        raise NotImplementedError

    def path(self, key: str) -> Path:
        return self.jobs / f"{key}.json"

    def save(self, record: R) -> None:
        """Atomic: a crash leaves the old or the new record, never half of one."""
        target = self.path(self.key(record))
        tmp = target.with_suffix(".json.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self._enc.encode(record))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)

    def load(self, key: str) -> R | None:
        try:
            return self._dec.decode(self.path(key).read_bytes())
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None

    def all(self) -> list[R]:
        records = (self.load(p.stem) for p in sorted(self.jobs.glob("*.json")))
        return [r for r in records if r is not None]

    def forget(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path(key).unlink()

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
