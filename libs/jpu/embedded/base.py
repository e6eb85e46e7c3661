"""What the embedded servers share: a free port, a context manager, the tail of their log."""

from __future__ import annotations

import socket
import threading
from collections.abc import Container
from pathlib import Path
from types import TracebackType
from typing import Self

_given: set[int] = set()
_given_lock = threading.Lock()


def free_port(host: str = "127.0.0.1", avoid: Container[int] = ()) -> int:
    """A TCP port that is free right now (the OS picks it), never one this process has handed
    out before nor one in `avoid`: a port is free until its server binds it, and the OS may
    offer it again in between (a gateway once met a service's /metrics listener on its port)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        with _given_lock:
            if port not in _given and port not in avoid:
                _given.add(port)
                return port


class EmbeddedServer:
    """A server process the project starts itself; subclasses set `_log_path`."""

    _log_path: Path

    def start(self) -> str:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def log_tail(self, lines: int = 20) -> str:
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
