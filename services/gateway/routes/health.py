"""Liveness and readiness (SPEC §8: readiness = bus and database reachable)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from jpu_services.gateway.deps import EdgesDep, SettingsDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


async def _check(probe: Any, timeout_s: float) -> str | None:
    try:
        await asyncio.wait_for(probe, timeout_s)
    except Exception as e:  # any failure means "not ready"; say which
        return f"{type(e).__name__}: {e}"
    return None


@router.get("/readyz", responses={503: {"description": "bus or database unreachable"}})
async def readyz(edges: EdgesDep, settings: SettingsDep) -> JSONResponse:
    """Readiness: the JetStream stream and PostgreSQL both answer now; "degraded" when a
    projection recorded an event it could not apply."""
    timeout = settings.readiness_timeout_s
    failures = {
        name: why
        for name, why in (
            ("bus", await _check(edges.bus.last_seq(), timeout)),
            ("database", await _check(edges.pool.fetchval("SELECT 1"), timeout)),
        )
        if why is not None
    }
    if failures:
        body = {
            "error": {
                "code": "NOT_READY",
                "message": "not ready: " + ", ".join(failures),
                "details": failures,
            }
        }
        return JSONResponse(body, status_code=503)
    ready: dict[str, Any] = {"status": "ready", "bus": "ok", "database": "ok"}
    # Events a projection could not apply (SPEC E3): still serving, but the views have holes —
    # an alarm the operator must see (jpu.store.projection, `projection_faults`).
    faulted = await edges.pool.fetch(
        "SELECT projection, count(*) AS n, min(seq) AS first_seq FROM projection_faults"
        " GROUP BY projection ORDER BY projection"
    )
    if faulted:
        ready["status"] = "degraded"
        ready["projection_faults"] = {
            r["projection"]: {"events": r["n"], "first_seq": r["first_seq"]} for r in faulted
        }
    return JSONResponse(ready)
