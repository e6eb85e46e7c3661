"""The gateway's FastAPI app (SPEC §8). Connections open in the lifespan, never at import."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from jpu.backends.workdir_check import JobAccounts
from jpu.policy.authfail import AuthThrottle
from jpu.runtime.resilience import retry, run_through_outages
from jpu.runtime.service import run_workers
from jpu.store.positions import PositionWatch
from jpu_services.gateway import bootstrap
from jpu_services.gateway.config import GatewayConfig
from jpu_services.gateway.deps import TokenCache
from jpu_services.gateway.errors import install_error_handlers
from jpu_services.gateway.guards import PathTemplates, TextGuard
from jpu_services.gateway.openapi import install_openapi
from jpu_services.gateway.ratelimit import from_settings
from jpu_services.gateway.routes import (
    admin,
    console,
    default_workspace,
    explain,
    health,
    jobs,
    labs,
    maintenance,
    me,
    metrics,
    notifications,
    placements,
    queue,
    workspaces,
)
from jpu_services.gateway.routes._queueview import new_shared_view

log = logging.getLogger("jpu.gateway")


def create_app(settings: GatewayConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        edges = await bootstrap.bootstrap(settings)
        stop = asyncio.Event()
        app.state.edges, app.state.crashed = edges, False
        app.state.positions = await retry(  # PostgreSQL may be restarting (SPEC O5)
            "PostgreSQL notifications", lambda: PositionWatch.start(settings.base.database_url)
        )
        # every per-app object is built here, once, before the first request
        app.state.token_cache = TokenCache()
        app.state.submit_limiter = from_settings(settings.base)
        app.state.auth_throttle = AuthThrottle(  # SEC5
            settings.base.auth_fail_limit, settings.base.auth_fail_window_s
        )
        app.state.job_accounts = JobAccounts(settings.base)  # X4: `account` in answers
        app.state.wait_cache = OrderedDict()
        app.state.queue_view = new_shared_view(app)
        projector = asyncio.create_task(  # paused, not crashed, by an outage (SPEC O5)
            run_through_outages(
                "projector", lambda s: run_workers(s, bootstrap.workers(settings, edges)), stop
            ),
            name="projector",
        )
        projector.add_done_callback(lambda t: _on_projector_done(app, t, stop))
        try:
            yield
        finally:
            stop.set()  # drain: projections finish their batch and commit (SPEC E3)
            await asyncio.gather(projector, return_exceptions=True)
            await app.state.positions.close()
            await edges.close()

    app = FastAPI(
        title="JPU-Share",
        version="0.1.0",
        lifespan=lifespan,
        description="Fair GPU sharing for research labs in front of Slurm (SPEC §8).",
    )
    app.state.settings = settings
    install_error_handlers(app)
    for module in (
        health,
        metrics,
        maintenance,
        me,
        notifications,
        default_workspace,
        jobs,
        explain,
        queue,
        labs,
        placements,
        admin,
        console,
        workspaces,
    ):
        app.include_router(module.router)
    install_openapi(app, [t.name for t in settings.base.tiers])
    app.state.paths = PathTemplates(lambda: app.openapi()["paths"])  # 405 Allow, guard
    app.add_middleware(TextGuard, templates=app.state.paths)  # NUL in path/query: 422 (§8)
    return app


def _on_projector_done(app: FastAPI, task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """A projection that dies outside shutdown takes the process down to be restarted (O5)."""
    if stop.is_set() or task.cancelled():
        return
    log.error("projector failed; stopping the gateway", exc_info=task.exception())
    app.state.crashed = True
    os.kill(os.getpid(), signal.SIGTERM)
