"""`Annotated` dependencies for routes: the adapters from the lifespan, and the caller.

All are `async def`: FastAPI runs a plain `def` dependency in a worker thread, a thread hop per
dependency per request."""

from __future__ import annotations

import time
from typing import Annotated, Final

import asyncpg
from fastapi import Depends, Request

from jpu.runtime.edges import Edges
from jpu.store import auth
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


TOKEN_CACHE_S: Final = 1.0  # a revoked token, or a changed role or limit, counts within this


class TokenCache:
    """Accepted tokens for `ttl_s` seconds: one database query per token per second instead of
    one per request (6 % of the gateway's CPU per submit, and a PostgreSQL round trip). Only
    accepted tokens are kept, so a new token works at once; a revoked one is refused at most
    `ttl_s` after its revocation."""

    def __init__(self, ttl_s: float = TOKEN_CACHE_S, max_entries: int = 10_000) -> None:
        self.ttl_s, self.max_entries = ttl_s, max_entries
        self._seen: dict[str, tuple[float, auth.Principal]] = {}

    def get(self, token: str, now: float) -> auth.Principal | None:
        hit = self._seen.get(token)
        if hit is None or hit[0] <= now:
            return None
        return hit[1]

    def put(self, token: str, principal: auth.Principal, now: float) -> None:
        if len(self._seen) >= self.max_entries:  # many distinct tokens: start over
            self._seen.clear()
        self._seen[token] = (now + self.ttl_s, principal)


async def _current_user(request: Request, pool: PoolDep) -> auth.Principal:
    """SPEC §8: a missing, malformed, unknown or revoked token is 401 UNAUTHENTICATED."""
    token = bearer_token(request)
    if token is None:
        raise unauthenticated("missing bearer token (Authorization: Bearer <token>)")
    cache: TokenCache = request.app.state.token_cache
    now = time.monotonic()
    principal = cache.get(token, now)
    if principal is None:
        principal = await auth.authenticate(pool, token)
        if principal is None:
            raise unauthenticated("invalid or revoked token")
        cache.put(token, principal, now)
    return principal


CurrentUser = Annotated[auth.Principal, Depends(_current_user)]
