"""Liveness and readiness (SPEC §8, O5).

`/readyz` is SPEC §8's readiness: the bus and the database reachable, else 503 naming which.
Intake and the log do not need PostgreSQL, so while the database is away a gateway still accepts
submits, answers maintenance status from the log and says 503 SERVICE_UNAVAILABLE (naming the
database, with Retry-After) for what only the projections know. A load balancer keeps such a
gateway in rotation by probing `/readyz?degraded=ok`: 200 `degraded` with the database's error
while the bus answers (compose's HAProxy and the k8s readinessProbe do). Without the bus a
gateway can do nothing useful: 503 either way, out of rotation. docs/operations.md, "A database
blip is not an outage".
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

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


@router.get(
    "/readyz",
    responses={503: {"description": "the bus (event log) or the database unreachable"}},
)
async def readyz(
    edges: EdgesDep, settings: SettingsDep, degraded: Literal["ok"] | None = None
) -> JSONResponse:
    """Readiness: the JetStream stream and PostgreSQL answer now (503 naming which otherwise).
    `?degraded=ok` (a load balancer's probe): 200 "degraded" while only PostgreSQL does not
    answer (submits and maintenance status are still served). 200 "degraded" also when a
    projection recorded an event it could not apply."""
    timeout = settings.readiness_timeout_s
    bus, database = await asyncio.gather(
        _check(edges.bus.last_seq(), timeout), _check(edges.pool.fetchval("SELECT 1"), timeout)
    )
    if bus is not None or (database is not None and degraded is None):
        details = {**({"bus": bus} if bus else {}), **({"database": database} if database else {})}
        body = {
            "error": {
                "code": "NOT_READY",
                "message": f"not ready: {', '.join(details)}",
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
