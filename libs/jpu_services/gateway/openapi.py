"""The OpenAPI document at /openapi.json says what the gateway really accepts and answers
(SPEC §8).

Routes declare their own statuses (`errors.responses(401, 404, ...)`); here, once for all:
  * the submit body is jpu.domain.limits' schema, with this cluster's tier names (what intake
    accepts);
  * every string parameter says it holds no NUL, and every operation may answer 422
    VALIDATION_ERROR (a NUL byte in any path or query parameter is refused before any route,
    jpu_services.gateway.guards); every operation that reads
    the database or the bus 503 SERVICE_UNAVAILABLE with Retry-After — all in the §8 shape,
    never FastAPI's `{"detail": ...}`.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from jpu.domain import limits
from jpu_services.gateway.errors import ErrorBody, responses
from jpu_services.gateway.routes import explain

NO_DEPENDENCY: Final = frozenset({"/healthz"})  # answers without the database or the bus
_REF: Final = "#/components/schemas/{model}"
NO_NUL: Final = "^[^\\u0000]*$"


def _error_response(description: str, *, retry_after: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(model="ErrorBody")}}},
    }
    if retry_after:
        out["headers"] = {
            "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}
        }
    return out


def _no_nul(schema: dict[str, Any]) -> None:
    """A string parameter says it may not hold NUL (the guard refuses it before any route)."""
    options = schema.get("anyOf", [])
    if "pattern" in schema and options:  # an optional parameter's own pattern: its string's
        pattern = schema.pop("pattern")
        for option in options:
            if option.get("type") == "string":
                option["pattern"] = pattern
    for option in [schema, *options]:
        if option.get("type") == "string" and "pattern" not in option:
            option["pattern"] = NO_NUL


def build(app: FastAPI, tier_names: Collection[str]) -> dict[str, Any]:
    doc = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    body = ErrorBody.model_json_schema(ref_template=_REF)
    schemas.update(body.pop("$defs", {}))
    schemas["ErrorBody"] = body
    schemas.update(explain.components())  # the explanations' answers (msgspec models)
    for name in ("HTTPValidationError", "ValidationError"):  # FastAPI's, never answered
        schemas.pop(name, None)
    submit = doc["paths"].get("/v1/jobs", {}).get("post")
    if submit is not None:
        content = submit.setdefault("requestBody", {"required": True}).setdefault("content", {})
        content["application/json"] = {"schema": limits.submit_schema(tier_names)}
    defaults = responses(422, 503)
    for path, operations in doc["paths"].items():
        for op in operations.values():
            for param in op.get("parameters", []):
                _no_nul(param.get("schema", {}))
            answers = op.setdefault("responses", {})
            answers["422"] = _error_response(
                str(answers.get("422", {}).get("description") or defaults[422]["description"])
            )
            if path not in NO_DEPENDENCY:
                described = answers.get("503", {}).get("description")
                answers["503"] = _error_response(
                    str(described or defaults[503]["description"]), retry_after=True
                )
    return doc


def install_openapi(app: FastAPI, tier_names: Collection[str]) -> None:
    """Serve `build(app)` (computed once, on the first request for it)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app, tier_names)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
