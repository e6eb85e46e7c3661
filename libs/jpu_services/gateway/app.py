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
from jpu.runtime import telemetry
from jpu.runtime.edges import Edges
from jpu.runtime.resilience import Unavailable, retry, run_through_outages
from jpu.runtime.service import run_workers
from jpu.store.db import migrate
from jpu.store.positions import PositionWatch
from jpu_services.gateway import bootstrap
from jpu_services.gateway.accesslog import AccessLog
from jpu_services.gateway.config import GatewayConfig
from jpu_services.gateway.deps import TokenCache
from jpu_services.gateway.errors import install_error_handlers
from jpu_services.gateway.guards import PathTemplates, TextGuard
from jpu_services.gateway.openapi import install_openapi
from jpu_services.gateway.personal import PersonalReasons
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
        app.state.positions = None  # read-your-writes polls until the watch listens
        # every per-app object is built here, once, before the first request
        app.state.token_cache = TokenCache()
        app.state.submit_limiter = from_settings(settings.base)
        app.state.auth_throttle = AuthThrottle(  # SEC5
            settings.base.auth_fail_limit, settings.base.auth_fail_window_s
        )
        app.state.job_accounts = JobAccounts(settings.base)  # X4: `account` in answers
        app.state.wait_cache = OrderedDict()
        app.state.queue_view = new_shared_view(app)
        app.state.personal_reasons = PersonalReasons(edges.bus, settings.base)
        folding = await app.state.personal_reasons.start(stop)  # D7 in the personal queue
        database = asyncio.create_task(
            _with_the_database(app, settings, edges, stop), name="database start"
        )
        database.add_done_callback(lambda t: _on_projector_done(app, t, stop))
        try:
            yield
        finally:
            stop.set()  # drain: projections finish their batch and commit (SPEC E3)
            await asyncio.gather(database, folding, return_exceptions=True)
            if app.state.positions is not None:
                await app.state.positions.close()
            await edges.close()

    app = FastAPI(
        title="JPU-Share",
        version="0.1.0",
        lifespan=lifespan,
        description="Fair GPU sharing for research labs in front of Slurm (SPEC §8).",
        # SPEC O4: FastAPI's request metrics (http.server.request.duration, active requests) on
        # every request, exact. Its server span only when spans are exported: unexported, it was
        # a tenth of the gateway's CPU per submit and went nowhere (its context is no event's
        # parent). Never its spans for dependency resolution, endpoint and serialization: three per
        # request for what the server span's duration already tells.
        telemetry={"tracing": telemetry.spans_exported(), "operation_spans": False},
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
    app.add_middleware(AccessLog)  # outermost: one line for every answer, the guard's too (O4)
    return app


async def _with_the_database(
    app: FastAPI, settings: GatewayConfig, edges: Edges, stop: asyncio.Event
) -> None:
    """What needs PostgreSQL, started once it answers — the gateway already serves meanwhile
    (SPEC O5: a database blip, or a start during one, is not an outage of the API): the
    migrations, the projections' position watch, then the projector, run until `stop`."""
    try:
        await retry("migrations", lambda: migrate(edges.pool), stop=stop)
        app.state.positions = await retry(
            "PostgreSQL notifications",
            lambda: PositionWatch.start(settings.base.database_url),
            stop=stop,
        )
    except Unavailable:
        if stop.is_set():
            return
        raise
    projector = asyncio.create_task(  # paused, not crashed, by an outage (SPEC O5)
        run_through_outages(
            "projector", lambda s: run_workers(s, bootstrap.workers(settings, edges)), stop
        ),
        name="projector",
    )
    projector.add_done_callback(lambda t: _on_projector_done(app, t, stop))
    await asyncio.gather(projector, return_exceptions=True)


def _on_projector_done(app: FastAPI, task: asyncio.Task[None], stop: asyncio.Event) -> None:
    """A projection that dies outside shutdown, or a start step that meets no outage but a
    verdict (bad credentials, a database that does not exist), takes the process down (O5)."""
    if stop.is_set() or task.cancelled() or task.exception() is None:
        return
    log.error("%s failed; stopping the gateway", task.get_name(), exc_info=task.exception())
    app.state.crashed = True
    os.kill(os.getpid(), signal.SIGTERM)
