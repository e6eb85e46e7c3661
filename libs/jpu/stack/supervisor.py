"""Run the seven services as child processes; restart a crashed one with backoff (SPEC O5).

Each child gets its own process group (session), so a stop reaches everything it started and
nothing is left behind: SIGTERM to the group, up to `grace_s` to drain, then SIGKILL.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("jpu.stack")

SERVICES = (
    "gateway",
    "intake",
    "dispatcher",
    "slurm_agent",
    "accounting",
    "backfill",
    "notifier",  # Q10: e-mail and webhook notifications
)
_BACKOFF_MIN_S, _BACKOFF_MAX_S = 1.0, 30.0
_HEALTHY_AFTER_S = 30.0  # a child that ran this long resets its backoff
DEFAULT_GATEWAY_WORKERS = 2  # JPU_GATEWAY_WORKERS; see _children


@dataclass
class Child:
    name: str
    log_path: Path
    module: str = ""  # jpu_services.<module>; the name when empty
    env: dict[str, str] = field(default_factory=dict)  # on top of the supervisor's
    proc: asyncio.subprocess.Process | None = None
    restarts: int = 0
    started_at: float = 0.0
    backoff_s: float = _BACKOFF_MIN_S
    pids: set[int] = field(default_factory=set)  # every pid it ever had (tests check them)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None


class Supervisor:
    def __init__(
        self,
        env: Mapping[str, str],
        log_dir: Path,
        services: tuple[str, ...] = SERVICES,
        identity: Callable[[str], dict[str, str]] | None = None,
    ) -> None:
        """`identity(service)`: the environment naming its own NATS identity (SPEC SEC2)."""
        self.env = {**env, "PYTHONUNBUFFERED": "1"}
        self.log_dir = log_dir
        self.children = [c for s in services for c in _children(s, log_dir, env)]
        if identity is not None:
            for child in self.children:
                child.env = {**identity(child.module or child.name), **child.env}
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, stop: asyncio.Event) -> None:
        """Start every service and keep it running until `stop` is set."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._tasks = [
            asyncio.create_task(self._keep_running(c, stop), name=c.name) for c in self.children
        ]

    async def _spawn(self, child: Child) -> None:
        with open(child.log_path, "ab") as out:
            child.proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                f"jpu_services.{child.module or child.name}",
                env={**self.env, **child.env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,  # own process group: see stop()
            )
        child.started_at = time.monotonic()
        child.pids.add(child.proc.pid)
        log.info(
            "service started",
            extra={"child": child.name, "pid": child.proc.pid, "log": str(child.log_path)},
        )

    async def _keep_running(self, child: Child, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await self._spawn(child)
            assert child.proc is not None
            exited = asyncio.create_task(child.proc.wait())
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait([exited, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if stop.is_set():
                exited.cancel()
                return
            ran = time.monotonic() - child.started_at
            child.backoff_s = (
                _BACKOFF_MIN_S
                if ran > _HEALTHY_AFTER_S
                else min(child.backoff_s * 2, _BACKOFF_MAX_S)
            )
            child.restarts += 1
            log.warning(
                "service exited; restarting",
                extra={
                    "child": child.name,
                    "exit_code": child.proc.returncode,
                    "ran_s": round(ran, 1),
                    "restart_in_s": child.backoff_s,
                    "restarts": child.restarts,
                },
            )
            _kill_group(child.proc.pid, signal.SIGKILL)  # anything it left behind
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), child.backoff_s)

    async def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every service's group, wait ≤ grace_s, SIGKILL what is left."""
        for task in self._tasks:
            await task
        running = [c for c in self.children if c.running]
        for c in running:
            assert c.proc is not None
            log.info("stopping service", extra={"child": c.name, "pid": c.proc.pid})
            _kill_group(c.proc.pid, signal.SIGTERM)
        waits = [c.proc.wait() for c in running if c.proc is not None]
        if waits:
            _, late = await asyncio.wait([asyncio.ensure_future(w) for w in waits], timeout=grace_s)
            if late:
                log.warning("services did not stop in time; killing", extra={"count": len(late)})
        for c in self.children:
            if c.proc is not None:
                _kill_group(c.proc.pid, signal.SIGKILL)  # stragglers of the group, if any
                await c.proc.wait()
                if c.proc.returncode not in (0, None):
                    log.warning(
                        "service exit code",
                        extra={"child": c.name, "exit_code": c.proc.returncode},
                    )


def _children(service: str, log_dir: Path, env: Mapping[str, str]) -> list[Child]:
    """One child per service, but `JPU_GATEWAY_WORKERS` gateways (default 2): one event loop
    is the submit path's bottleneck on a 2-core machine. They share the port (SO_REUSEPORT, the
    kernel spreads connections); only the first runs the projections (one consumer per durable,
    SPEC E3), the others serve the API and read-your-writes through the same tables."""
    workers = int(env.get("JPU_GATEWAY_WORKERS", "") or DEFAULT_GATEWAY_WORKERS)
    if service != "gateway" or workers <= 1:
        return [Child(service, log_dir / f"{service}.log")]
    shared = {"JPU_GATEWAY_REUSE_PORT": "1"}
    return [Child("gateway", log_dir / "gateway.log", env=shared)] + [
        Child(
            f"gateway-{i}",
            log_dir / f"gateway-{i}.log",
            module="gateway",
            env={**shared, "JPU_GATEWAY_PROJECTOR": "0"},
        )
        for i in range(2, workers + 1)
    ]


def _kill_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
