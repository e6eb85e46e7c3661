"""One structured access-log line per HTTP request (SPEC O4): method, the route's path template
(`/v1/jobs/{job_id}`, never the concrete path or the query), status, duration and the caller's
user name once authenticated (`-` before) — never a token or a header.

A pure ASGI middleware, outermost but for the framework's error middleware, so it sees every
answer: the guard's 422, a routing 404, a 503 from an outage; an exception that escapes is
logged as the 500 the error middleware then sends. Probes and scrapes (/healthz, /readyz,
/metrics) are logged at DEBUG: a load balancer asks every 2 s and would drown the requests.
"""

from __future__ import annotations

import logging
import time
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("jpu.gateway.access")

USER_KEY: Final = "jpu.user"  # set in the scope by the authentication dependency (deps.py)
QUIET: Final = frozenset({"/healthz", "/readyz", "/metrics"})


def template_of(scope: Scope) -> str:
    """The matched route's path template; `<unmatched>` when no route matched (the concrete
    path could hold anything a client typed, even a token pasted in the wrong place)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "<unmatched>"


class AccessLog:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.monotonic()
        status = 500  # what the error middleware sends when the app raises before answering

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            path = template_of(scope)
            level = logging.DEBUG if path in QUIET else logging.INFO
            log.log(
                level,
                "request",
                extra={
                    "method": scope.get("method", ""),
                    "path": path,
                    "status": status,
                    "duration_ms": round((time.monotonic() - started) * 1000, 1),
                    "user": scope.get(USER_KEY, "-"),
                },
            )
