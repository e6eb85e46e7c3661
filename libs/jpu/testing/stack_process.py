"""`python -m jpu.stack run` (what `make run` calls) as a real process tree, for tests (SPEC O2).

`StackProcess` starts the stack in its own session with its own data dir and gateway port,
collects stdout (the ready banner and demo tokens) on a thread, and stops it the way Ctrl-C does.
The process-tree helpers let a test check that nothing outlives the stack.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from jpu.embedded.base import free_port
from jpu.stack import private

READY_TIMEOUT_S = 60.0
BANNER = "JPU-Share is up:"


def world_searchable_tmpdir(prefix: str = "jpu-stack-test-") -> Path:
    """Not pytest's tmp_path: its parents are 0700, and as root the embedded PostgreSQL and the
    jobs (run as the users' own UIDs, SPEC X4) must reach files under it."""
    d = Path(tempfile.mkdtemp(prefix=prefix))
    d.chmod(0o755)
    return d


def remove_data_dir(data_dir: Path) -> None:
    """A stack's data dir and what a root stack kept for it outside (SPEC SEC1, stack.private)."""
    for d in (data_dir, *(private.outside(data_dir, kind) for kind in private.KINDS)):
        shutil.rmtree(d, ignore_errors=True)


def _stat_fields(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (field 3 onwards)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()


def alive(pid: int) -> bool:
    """The process exists and has not exited (a zombie has)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def descendants(root: int) -> set[int]:
    parents = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        fields = _stat_fields(int(p))
        if fields is not None:
            parents[int(p)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


class StackProcess:
    """A running `python -m jpu.stack run`. `env` entries set to None are unset. `relative`
    gives the data dir as a relative path, like `make run` (whose data dir is `.jpu`)."""

    def __init__(
        self, env: Mapping[str, str | None], data_dir: Path, *, relative: bool = False
    ) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        merged = {
            **os.environ,
            **env,
            "JPU_DATA_DIR": data_dir.name if relative else str(data_dir),
            "JPU_GATEWAY_PORT": str(self.port),
        }
        self.env = {k: v for k, v in merged.items() if v is not None}
        self.stderr = open(data_dir / "stack.stderr", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jpu.stack", "run"],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            start_new_session=True,
            cwd=data_dir.parent,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not any(line.startswith(BANNER) for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"stack not ready (rc={self.proc.returncode}):\n{self.log_tail()}")
            time.sleep(0.1)

    def token(self, user: str) -> str:
        """The demo token the banner printed for `user`."""
        row = next(line.split() for line in self.lines if line.split()[:1] == [user])
        return row[-1]

    def service_log(self, name: str) -> list[dict[str, Any]]:
        path = self.data_dir / "logs" / f"{name}.log"
        if not path.exists():
            return []
        return [json.loads(x) for x in path.read_text().splitlines() if x.startswith("{")]

    def supervisor_log(self) -> list[dict[str, Any]]:
        self._flush()
        text = (self.data_dir / "stack.stderr").read_text()
        return [json.loads(x) for x in text.splitlines() if x.startswith("{")]

    def service_pids(self, name: str) -> list[int]:
        return [
            e["pid"]
            for e in self.supervisor_log()
            if e.get("child") == name and e["msg"] == "service started"
        ]

    def log_tail(self) -> str:
        self._flush()
        return (self.data_dir / "stack.stderr").read_text()[-4000:]

    def _flush(self) -> None:
        if not self.stderr.closed:  # closed once stopped: the file is complete then
            self.stderr.flush()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # what Ctrl-C does
        try:
            return self.proc.wait(timeout=45)
        finally:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.stderr.close()
