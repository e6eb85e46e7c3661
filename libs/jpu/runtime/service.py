"""Process plumbing shared by every service (SPEC E4/E5): JSON logs, signals, telemetry.

A service's `__main__` calls `run_service(name, main)`; `main(stop)` runs until the `stop` event
is set by SIGTERM/SIGINT, then drains and returns, and the process exits 0. An exception exits 1
so the supervisor (or Kubernetes) restarts the process (SPEC O5: state lives in the log) — except
an outage of the bus or the database, which a worker service waits out in-process
(jpu.runtime.resilience): restarting would only meet the same outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from jpu.runtime.resilience import Unavailable, run_through_outages

log = logging.getLogger("jpu.runtime.service")

# Attributes every LogRecord has; anything else came from `extra=` and is logged as a field.
_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


async def wait_any(timeout: float, *events: asyncio.Event) -> None:
    """Until any of `events` is set or `timeout` s pass: a service loop's sleep that a wake-up
    or the stop event cuts short."""
    waits = [asyncio.create_task(e.wait()) for e in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, service, logger, msg, extra fields, exc."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def setup_logging(service: str, level: str | None = None) -> None:
    """Route all logging (ours, uvicorn's, libraries') to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel((level or os.environ.get("JPU_LOG_LEVEL", "INFO")).upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers.clear()
        logging.getLogger(name).propagate = True


def setup_telemetry(service: str) -> None:
    """OpenTelemetry through jpu.runtime.telemetry when it can be imported (SPEC O4); else none."""
    try:
        telemetry = importlib.import_module("jpu.runtime.telemetry")
    except ImportError:
        return
    setup = getattr(telemetry, "setup_telemetry", None)
    if setup is not None:
        setup(service)


def install_stop_signals(stop: asyncio.Event) -> None:
    """SIGTERM / SIGINT set `stop` once; a second signal is logged and ignored (we are draining)."""
    loop = asyncio.get_running_loop()

    def _on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.info("signal during shutdown ignored", extra={"signal": sig.name})
            return
        log.info("stopping", extra={"signal": sig.name})
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, sig)


Worker = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


HEARTBEAT_EVERY_S = 5.0


def heartbeat_worker(path: str) -> Worker:
    """Touch `path` every few seconds while the event loop is healthy.

    Container probes of services without HTTP (compose/, k8s/) check that the file is fresh: it
    exists only once the service is connected, and goes stale if the loop hangs.
    """

    async def beat(stop: asyncio.Event) -> None:
        file = Path(path)
        file.parent.mkdir(parents=True, exist_ok=True)
        while not stop.is_set():
            file.touch()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), HEARTBEAT_EVERY_S)
        file.unlink(missing_ok=True)

    return beat


async def run_workers(
    stop: asyncio.Event, workers: dict[str, Worker], grace_s: float = 10.0
) -> None:
    """Run each `worker(stop)` until `stop` is set, then let them drain (≤ grace_s).

    A worker that fails before `stop` re-raises here, which crashes the process on purpose:
    the supervisor restarts it and it resumes from the log (SPEC O5).
    """
    if os.environ.get("JPU_HEARTBEAT_FILE"):
        workers = {**workers, "heartbeat": heartbeat_worker(os.environ["JPU_HEARTBEAT_FILE"])}
    tasks = {asyncio.create_task(w(stop), name=n): n for n, w in workers.items()}
    stopping = asyncio.create_task(stop.wait())
    try:
        done, _ = await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
        for task, name in tasks.items():
            if task in done:
                task.result()  # raises the worker's error
                if not stop.is_set():
                    raise RuntimeError(f"worker {name} returned before stop")
        stop.set()
        _, late = await asyncio.wait(tasks, timeout=grace_s) if tasks else (set(), set())
        for task in late:
            log.warning("worker did not drain in time; cancelled", extra={"worker": tasks[task]})
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        # A worker that failed after `stop` was set (by itself, on its way out, or while
        # draining) is a crash too: a service never stops silently with exit 0.
        for name, result in zip(tasks.values(), results, strict=True):
            if isinstance(result, Exception):
                log.error("worker failed", extra={"worker": name, "error": repr(result)})
                raise result
    finally:
        stopping.cancel()
        for task in tasks:
            task.cancel()


def run_service(name: str, main: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `main(stop)` as the whole process; exit 0 after a graceful stop, 1 on a crash."""
    setup_logging(name)
    setup_telemetry(name)

    async def _run() -> None:
        stop = asyncio.Event()
        install_stop_signals(stop)
        await main(stop)

    started = time.monotonic()
    log.info("starting", extra={"pid": os.getpid()})
    try:
        asyncio.run(_run())
    except Exception:
        log.exception("crashed")
        sys.exit(1)
    log.info("stopped", extra={"uptime_s": round(time.monotonic() - started, 3)})
    sys.exit(0)


def serve_workers(name: str, package: str) -> None:
    """The whole `__main__` of a worker service: load its config, wire its edges
    (`<package>.bootstrap.bootstrap`), run its workers until SIGTERM, then close the edges."""
    config = importlib.import_module(f"{package}.config")
    bootstrap = importlib.import_module(f"{package}.bootstrap")

    async def main(stop: asyncio.Event) -> None:
        try:
            edges = await bootstrap.bootstrap(config.load(), stop)
        except Unavailable:
            if stop.is_set():  # SIGTERM while waiting for the bus or the database: not a crash
                log.info("stopped before the edges answered")
                return
            raise
        try:  # an outage of the bus or the database pauses the workers; it never exits us
            await run_through_outages(
                name, lambda round_stop: run_workers(round_stop, bootstrap.workers(edges)), stop
            )
        finally:
            await edges.close()

    run_service(name, main)
