"""Liveness and readiness (SPEC §8, O5).

Readiness is "this gateway can take requests": the event log (NATS JetStream) answers. Intake
and the log do not need PostgreSQL, so while the database is away a gateway still accepts
submits, answers maintenance status from the log and says 503 SERVICE_UNAVAILABLE (naming the
database, with Retry-After) for what only the projections know — it stays in the load
balancer's rotation, and /readyz says `degraded` with the database's error. Without the bus a
gateway can do nothing useful: 503, out of rotation. docs/operations.md, "Health and readiness".
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from jpu.runtime.resilience import within
from jpu_services.gateway.deps import EdgesDep, SettingsDep

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


async def _check(probe: Any, timeout_s: float) -> str | None:
    try:
        await within(probe, timeout_s, "readiness")
    except Exception as e:  # any failure means "not ready"; say which
        return f"{type(e).__name__}: {e}"
    return None


@router.get("/readyz", responses={503: {"description": "the bus (event log) unreachable"}})
async def readyz(edges: EdgesDep, settings: SettingsDep) -> JSONResponse:
    """Readiness: the JetStream stream answers now (503 otherwise). 200 "degraded" while
    PostgreSQL does not answer (submits and maintenance status still served) or when a
    projection recorded an event it could not apply."""
    timeout = settings.readiness_timeout_s
    bus, database = await asyncio.gather(
        _check(edges.bus.last_seq(), timeout), _check(edges.pool.fetchval("SELECT 1"), timeout)
    )
    if bus is not None:
        details = {"bus": bus, **({"database": database} if database else {})}
        body = {
            "error": {
                "code": "NOT_READY",
                "message": "not ready: bus",
                "details": details,
            }
        }
        return JSONResponse(body, status_code=503)
    if database is not None:  # in rotation: what needs the database says 503 itself
        return JSONResponse({"status": "degraded", "bus": "ok", "database": database})
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
