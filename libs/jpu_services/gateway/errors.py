"""The one error envelope (SPEC §8): `{"error": {"code", "message", "details"}}` for every error.

Every failure a route can meet ends in it (SPEC O5): the framework's own errors
(routing 404/405 with `Allow`, body parsing 400, parameter validation 422 naming the field), a
database or bus that does not answer (503 SERVICE_UNAVAILABLE with `Retry-After`), and, last,
anything unexpected (500 INTERNAL, logged with its traceback) — never a plain-text 500.
`responses(...)` documents the same statuses and body in the OpenAPI document.
"""

from __future__ import annotations

import logging
from typing import Any, Final

import asyncpg
import nats.errors
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from jpu.bus.errors import is_unreachable
from jpu.domain.limits import printable

log = logging.getLogger("jpu.gateway.errors")

RETRY_AFTER_S: Final = 2  # a dependency restarting: ask again shortly

# HTTP status -> SPEC §8 error code, for errors raised by the framework itself (routing, etc.).
_CODES = {
    400: "BAD_REQUEST",
    401: "UNAUTHENTICATED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    422: "VALIDATION_ERROR",
    429: "RATE_LIMITED",
    503: "SERVICE_UNAVAILABLE",
}


class ApiError(Exception):
    """Raised by routes and dependencies; rendered as the SPEC §8 envelope."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details = details or {}
        self.headers = headers


def unauthenticated(message: str = "missing or invalid bearer token") -> ApiError:
    return ApiError(401, "UNAUTHENTICATED", message, headers={"WWW-Authenticate": "Bearer"})


def forbidden(message: str = "not allowed") -> ApiError:
    return ApiError(403, "FORBIDDEN", message)


def envelope(
    status: int,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return envelope(exc.status, exc.code, exc.message, exc.details, exc.headers)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _CODES.get(exc.status_code, "ERROR")
    message = exc.detail if isinstance(exc.detail, str) else code.lower()
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:  # every method of the path, not only the first route's
        paths = getattr(request.app.state, "paths", None)
        allowed = paths.methods(request.url.path) if paths is not None else set()
        if allowed:
            headers["Allow"] = ", ".join(sorted(allowed))
        details = {"allow": headers.get("Allow", "")}
        return envelope(405, code, message, details, headers=headers)
    return envelope(exc.status_code, code, message, headers=headers or None)


def _loc(loc: Any) -> list[Any]:
    return [printable(x) if isinstance(x, str) else x for x in loc]


async def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    """FastAPI's parameter/body validation: 422 VALIDATION_ERROR naming the field (SPEC §8)."""
    assert isinstance(exc, RequestValidationError)
    problems = [
        {
            "loc": _loc(e.get("loc", ())),
            "msg": printable(str(e.get("msg", ""))),
            "type": e.get("type", ""),
        }
        for e in exc.errors()
    ]
    details: dict[str, Any] = {"errors": problems}
    message = "request is not valid"
    if problems:
        loc = [x for x in problems[0]["loc"] if x not in ("body", "query", "path", "header")]
        details["field"] = ".".join(str(x) for x in loc) or "body"
        message = f"{details['field']}: {problems[0]['msg']}"
    return envelope(422, "VALIDATION_ERROR", message, details)


def unavailable(what: str, exc: BaseException | None = None) -> JSONResponse:
    """503 SERVICE_UNAVAILABLE with Retry-After: PostgreSQL or NATS did not answer (§8)."""
    why = f": {type(exc).__name__}" if exc is not None else ""
    return envelope(
        503,
        "SERVICE_UNAVAILABLE",
        f"{what} is unavailable{why}; try again shortly",
        {"dependency": what},
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def unreachable_dependency(exc: BaseException) -> str | None:
    """Which dependency did not answer ("database", "bus"), or None when `exc` is no outage
    (a verdict on the request, or a bug)."""
    if isinstance(
        exc,
        asyncpg.PostgresConnectionError  # 08xxx, ConnectionDoesNotExistError
        | asyncpg.exceptions.OperatorInterventionError  # 57xxx: shutting down, starting up
        | asyncpg.exceptions.InsufficientResourcesError  # 53xxx: too many connections
        | asyncpg.InterfaceError,  # the pool's connection is closed
    ):
        return "database"
    if type(exc).__module__.split(".")[0] == "nats" and is_unreachable(exc):
        return "bus"
    if isinstance(exc, OSError):  # refused / reset / timed out (asyncpg raises these as is)
        return "database or bus"
    return None


_OUTAGES: Final = (
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.InterfaceError,
    nats.errors.Error,
    OSError,
)


async def _outage(_: Request, exc: Exception) -> JSONResponse:
    """503 for a dependency that does not answer, handled like any API error (no traceback
    per request while PostgreSQL restarts); anything else of these classes goes on to 500."""
    what = unreachable_dependency(exc)
    if what is None:
        raise exc
    log.warning("dependency unavailable", extra={"dependency": what, "error": repr(exc)})
    return unavailable(what, exc)


async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
    """The last resort: 500 INTERNAL in the §8 shape (the server logs the traceback)."""
    what = unreachable_dependency(exc)
    if what is not None:
        return unavailable(what, exc)
    return envelope(500, "INTERNAL", "internal error; the gateway logged it")


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    for cls in _OUTAGES:
        app.add_exception_handler(cls, _outage)
    app.add_exception_handler(Exception, _unexpected)


# --- the OpenAPI side: what each route really answers ---------------------------------------


class ErrorDetail(BaseModel):
    code: str
    message: str
    details: dict[str, Any]


class ErrorBody(BaseModel):
    """SPEC §8: every error is `{"error": {"code", "message", "details"}}`."""

    error: ErrorDetail


_DESCRIPTIONS: Final[dict[int, str]] = {
    400: "BAD_REQUEST (the body could not be read)",
    401: "UNAUTHENTICATED (missing, invalid or revoked bearer token)",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    409: "CONFLICT",
    422: "VALIDATION_ERROR naming the field (details.field)",
    429: "RATE_LIMITED (see Retry-After)",
    503: "SERVICE_UNAVAILABLE: the database or the bus does not answer (see Retry-After)",
}
_RETRY_AFTER: Final = {
    "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}
}


def responses(*statuses: int, **descriptions: str) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI `responses` of a route: each error status with the §8 body. Override a
    description with `s409="ALREADY_TERMINAL / IDEMPOTENCY_CONFLICT"`."""
    out: dict[int | str, dict[str, Any]] = {}
    for status in statuses:
        entry: dict[str, Any] = {
            "model": ErrorBody,
            "description": descriptions.get(f"s{status}", _DESCRIPTIONS.get(status, "error")),
        }
        if status in (429, 503):
            entry["headers"] = _RETRY_AFTER
        out[status] = entry
    return out
