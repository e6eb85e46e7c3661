"""`python -m jpu_services.gateway`: the FastAPI app under uvicorn (SIGTERM → drain → exit 0)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator

import uvicorn

from jpu.runtime.service import setup_logging, setup_telemetry
from jpu_services.gateway import config
from jpu_services.gateway import server as server_config
from jpu_services.gateway.app import create_app

log = logging.getLogger("jpu.gateway")


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Like uvicorn's, minus re-raising the signal after the graceful shutdown: a SIGTERM'd
        gateway that drained cleanly exits 0, as every service does."""
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)


def main() -> int:
    setup_logging("gateway")
    setup_telemetry("gateway")
    settings = config.load()
    app = create_app(settings)
    # uvicorn owns SIGINT/SIGTERM here: it stops accepting, finishes requests, runs the lifespan
    # shutdown (projector drain, pool and bus closed) and returns. Header/body read timeouts:
    # jpu_services.gateway.server.
    server = _Server(server_config.uvicorn_config(app, settings.host, settings.port))
    try:
        sockets = [_shared_socket(settings.host, settings.port)] if _reuse_port() else None
    except OSError as e:
        log.error("gateway did not start: %s", e)
        return 1
    server.run(sockets=sockets)
    if not server.started:  # port taken, or the lifespan startup failed (bus/db unreachable)
        log.error("gateway did not start")
        return 1
    if getattr(app.state, "crashed", False):  # a projector died: restart us (SPEC O5)
        return 1
    log.info("stopped")
    return 0


def _reuse_port() -> bool:
    return os.environ.get("JPU_GATEWAY_REUSE_PORT", "").strip().lower() in {"1", "true", "yes"}


def _shared_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound with SO_REUSEPORT: the stack runs several gateway processes
    on one port and the kernel spreads connections over them (jpu.stack.supervisor)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


if __name__ == "__main__":
    sys.exit(main())
