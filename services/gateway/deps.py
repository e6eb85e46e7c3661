"""`Annotated` dependencies for routes: the adapters from the lifespan, and the caller.

All are `async def`: FastAPI runs a plain `def` dependency in a worker thread, a thread hop per
dependency per request."""

from __future__ import annotations

from typing import Annotated

import asyncpg
from fastapi import Depends, Request

from jpu import auth
from jpu.edges import Edges
from jpu_services.gateway.config import GatewayConfig
from jpu_services.gateway.errors import unauthenticated


async def _edges(request: Request) -> Edges:
    edges: Edges = request.app.state.edges
    return edges


async def _pool(request: Request) -> asyncpg.Pool:
    edges: Edges = request.app.state.edges
    return edges.pool


async def _settings(request: Request) -> GatewayConfig:
    settings: GatewayConfig = request.app.state.settings
    return settings


EdgesDep = Annotated[Edges, Depends(_edges)]
PoolDep = Annotated[asyncpg.Pool, Depends(_pool)]
SettingsDep = Annotated[GatewayConfig, Depends(_settings)]


def bearer_token(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


async def _current_user(request: Request, pool: PoolDep) -> auth.Principal:
    """SPEC §8: a missing, malformed, unknown or revoked token is 401 UNAUTHENTICATED."""
    token = bearer_token(request)
    if token is None:
        raise unauthenticated("missing bearer token (Authorization: Bearer <token>)")
    principal = await auth.authenticate(pool, token)
    if principal is None:
        raise unauthenticated("invalid or revoked token")
    return principal


CurrentUser = Annotated[auth.Principal, Depends(_current_user)]
