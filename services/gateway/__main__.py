"""`python -m jpu_services.gateway`: the FastAPI app under uvicorn (SIGTERM → drain → exit 0)."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
from collections.abc import Iterator

import uvicorn

from jpu.service import setup_logging, setup_telemetry
from jpu_services.gateway import config
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
    # shutdown (projector drain, pool and bus closed) and returns.
    server = _Server(
        uvicorn.Config(
            app,
            host=settings.host,
            port=settings.port,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=10,
        )
    )
    server.run()
    if not server.started:  # port taken, or the lifespan startup failed (bus/db unreachable)
        log.error("gateway did not start")
        return 1
    if getattr(app.state, "crashed", False):  # a projector died: restart us (SPEC O5)
        return 1
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
