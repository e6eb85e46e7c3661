"""`/metrics` on the gateway's own port (SPEC O4): Prometheus text, no token, like /healthz.

Left out of the OpenAPI document: it is for the scraper, not an API client.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import Response

from jpu.runtime.metrics_endpoint import render

router = APIRouter(tags=["health"])


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics() -> Response:
    # the collection runs the gauges' callbacks: off the event loop, as the SDK's own export does
    body, content_type = await asyncio.to_thread(render)
    return Response(body, media_type=content_type)
