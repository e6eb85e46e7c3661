"""Refuse, before any route, a path or query parameter no store can hold (SPEC O5).

A NUL byte (`%00`) in a job id or in `?lab=`, `?state=`, `?user=` reached asyncpg, which raised
(PostgreSQL text cannot hold NUL) and the client got a plain-text 500. Here every path parameter
and query parameter of every route, present and future, is checked with jpu.domain.limits' one rule
for text; a refusal is 422 VALIDATION_ERROR naming the parameter (SPEC §8).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

from jpu.domain.limits import FieldError, printable, text_problem
from jpu_services.gateway.errors import envelope

_PARAM = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")


class PathTemplates:
    """The API's paths as the OpenAPI document lists them (`/v1/jobs/{job_id}` ...), to tell
    which operations and path parameters a concrete path is."""

    def __init__(self, paths: Callable[[], Mapping[str, Mapping[str, Any]]]) -> None:
        self._paths = paths
        self._compiled: list[tuple[re.Pattern[str], frozenset[str]]] | None = None

    def _patterns(self) -> list[tuple[re.Pattern[str], frozenset[str]]]:
        if self._compiled is None:
            out = []
            for template, operations in self._paths().items():
                parts = _PARAM.split(template)  # literal, name, literal, name, ...
                regex = "".join(
                    re.escape(part) if i % 2 == 0 else f"(?P<{part}>[^/]+)"
                    for i, part in enumerate(parts)
                )
                methods = frozenset(m.upper() for m in operations if m != "parameters")
                out.append((re.compile(f"^{regex}$", re.DOTALL), methods))
            self._compiled = out
        return self._compiled

    def params(self, path: str) -> dict[str, str]:
        """The path parameters of the first template `path` matches ({} if none)."""
        for pattern, _ in self._patterns():
            m = pattern.match(path)
            if m:
                return m.groupdict()
        return {}

    def methods(self, path: str) -> set[str]:
        """Every method some operation at `path` accepts (the `Allow` of a 405)."""
        allowed: set[str] = set()
        for pattern, methods in self._patterns():
            if pattern.match(path):
                allowed |= methods
        return allowed


class TextGuard:
    """Pure ASGI middleware; `templates` only name the path parameter in the error."""

    def __init__(self, app: ASGIApp, templates: PathTemplates | None = None) -> None:
        self.app = app
        self.templates = templates

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = self._problem(scope)
            if problem is not None:
                where, error = problem
                response = envelope(
                    422,
                    "VALIDATION_ERROR",
                    f"{error.field}: {error.message}",
                    {"field": error.field, "in": where},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _problem(self, scope: Scope) -> tuple[str, FieldError] | None:
        path = scope.get("path", "")
        why = text_problem(path)
        if why:
            return "path", FieldError(self._path_param(path) or "path", why)
        raw = scope.get("query_string", b"")
        if raw:
            # as Starlette decodes them (QueryParams): the bytes as latin-1, then %-escapes
            for key, value in parse_qsl(raw.decode("latin-1"), keep_blank_values=True):
                why = text_problem(key) or text_problem(value)
                if why:
                    return "query", FieldError(printable(key) or "query", why)
        return None

    def _path_param(self, path: str) -> str | None:
        """The name of the path parameter holding the bad text (`job_id`), if a path matches."""
        if self.templates is None:
            return None
        for name, value in self.templates.params(path).items():
            if text_problem(value):
                return name
        return None
