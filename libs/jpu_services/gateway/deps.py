"""`Annotated` dependencies for routes: the adapters from the lifespan, and the caller.

All are `async def`: FastAPI runs a plain `def` dependency in a worker thread, a thread hop per
dependency per request."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, Final

import asyncpg
from fastapi import Depends, Request

from jpu.policy.authfail import AuthThrottle
from jpu.runtime import metrics
from jpu.runtime.edges import Edges
from jpu.runtime.resilience import within
from jpu.store import auth
from jpu_services.gateway.accesslog import USER_KEY
from jpu_services.gateway.config import GatewayConfig
from jpu_services.gateway.errors import (
    RETRY_AFTER_S,
    ApiError,
    unauthenticated,
    unreachable_dependency,
)
from jpu_services.gateway.ratelimit import retry_after_header

log = logging.getLogger(__name__)


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
# While PostgreSQL does not answer, a token this gateway accepted within this many seconds is
# still accepted (SPEC O5: a database blip is not an outage of the API). A revocation is itself a
# database write, so none can happen meanwhile; only one made in the last
# AUTH_OUTAGE_GRACE_S before the outage could be missed, and only until the database is back.
AUTH_OUTAGE_GRACE_S: Final = 600.0
# A database that hangs (a network partition, a frozen server) rather than refusing: a token's
# lookup waits this long, then counts as the database being away.
AUTH_QUERY_TIMEOUT_S: Final = 3.0
DATABASE_AWAY: Final = "jpu.database_away"  # in a request's scope once it found it away


class TokenCache:
    """Accepted tokens for `ttl_s` seconds: one database query per token per second instead of
    one per request (6 % of the gateway's CPU per submit, and a PostgreSQL round trip). Only
    accepted tokens are kept, so a new token works at once; a revoked one is refused at most
    `ttl_s` after its revocation.

    Requests that miss together share one query (`lookup`): at expiry, every request in flight
    for a token asked the database at once. A request joins only a query started less than
    `ttl_s` ago, so a revocation counts within `ttl_s` as for a cached answer."""

    def __init__(
        self,
        ttl_s: float = TOKEN_CACHE_S,
        max_entries: int = 10_000,
        outage_grace_s: float = AUTH_OUTAGE_GRACE_S,
    ) -> None:
        self.ttl_s, self.max_entries, self.outage_grace_s = ttl_s, max_entries, outage_grace_s
        self._seen: dict[str, tuple[float, auth.Principal]] = {}  # token -> (checked at, who)
        # token -> (asked at, the query in flight)
        self._asking: dict[str, tuple[float, asyncio.Future[auth.Principal | None]]] = {}

    def get(self, token: str, now: float) -> auth.Principal | None:
        return self._within(token, now, self.ttl_s)

    def get_during_outage(self, token: str, now: float) -> auth.Principal | None:
        """The principal the database confirmed for `token` within `outage_grace_s`: asked
        only when the database does not answer."""
        return self._within(token, now, self.outage_grace_s)

    def _within(self, token: str, now: float, age_s: float) -> auth.Principal | None:
        hit = self._seen.get(token)
        if hit is None or now - hit[0] >= age_s:
            return None
        return hit[1]

    def lookup(
        self, token: str, now: float, query: Callable[[], Awaitable[auth.Principal | None]]
    ) -> asyncio.Future[auth.Principal | None]:
        """`query()`'s answer for `token`, shared with the requests that miss meanwhile, and
        cached (`put`) as of `now` when it accepts. The query runs to its end even if the
        request that started it is gone (await it shielded)."""
        asking = self._asking.get(token)
        if asking is not None and now - asking[0] < self.ttl_s:
            return asking[1]
        future = asyncio.ensure_future(query())

        def done(f: asyncio.Future[auth.Principal | None]) -> None:
            if self._asking.get(token, (0.0, None))[1] is f:
                del self._asking[token]
            if f.cancelled() or f.exception() is not None:  # retrieved: each waiter raises it
                return
            principal = f.result()
            if principal is not None:  # as of when it was asked, not when a joiner joined
                self.put(token, principal, now)

        future.add_done_callback(done)
        self._asking[token] = (now, future)
        return future

    def put(self, token: str, principal: auth.Principal, now: float) -> None:
        if len(self._seen) >= self.max_entries:  # many distinct tokens: start over
            self._seen.clear()
        self._seen[token] = (now, principal)


async def _current_user(request: Request) -> auth.Principal:
    """SPEC §8: a missing, malformed, unknown or revoked token is 401 UNAUTHENTICATED.
    SPEC SEC5: a client address with too many wrong tokens lately is 429 before its token is
    even looked at (so a guess made while throttled cannot succeed).

    The pool is read here rather than as a dependency of its own: every route has this one,
    and FastAPI solves each nested dependency with a pass of its own."""
    throttle: AuthThrottle = request.app.state.auth_throttle
    client = request.client.host if request.client else "-"
    now = time.monotonic()
    if (wait := throttle.retry_after(client, now)) > 0:
        metrics.count_auth_failure("throttled")
        raise ApiError(
            429, "RATE_LIMITED", "too many failed authentications from this address",
            headers={"Retry-After": retry_after_header(wait)},
        )  # fmt: skip
    token = bearer_token(request)
    if token is None:  # no guess made: not counted (a browser's first request has none)
        raise unauthenticated("missing bearer token (Authorization: Bearer <token>)")
    cache: TokenCache = request.app.state.token_cache
    principal = cache.get(token, now)
    if principal is None:
        try:
            principal = await asyncio.shield(
                cache.lookup(
                    token,
                    now,
                    lambda: within(
                        auth.authenticate(request.app.state.edges.pool, token),
                        AUTH_QUERY_TIMEOUT_S,
                        "the token's lookup",
                    ),
                )
            )
        except Exception as e:
            if unreachable_dependency(e) is None:
                raise
            principal = _during_outage(cache, token, now, e)
            request.scope[DATABASE_AWAY] = True  # this request does not wait on it again
            cache.put(token, principal, now)
        if principal is None:
            _failed(throttle, client, now)
            raise unauthenticated("invalid or revoked token")
    request.scope[USER_KEY] = principal.name  # the access log's `user` (accesslog.py)
    return principal


def _during_outage(
    cache: TokenCache, token: str, now: float, error: BaseException
) -> auth.Principal:
    """The database did not answer: a token confirmed lately is still accepted; any other is
    neither accepted nor refused, but told the database is away (503, never a 401 that would
    make a client drop a good token)."""
    principal = cache.get_during_outage(token, now)
    if principal is not None:
        return principal
    log.warning("token not checked: database unavailable", extra={"error": repr(error)})
    raise ApiError(
        503,
        "SERVICE_UNAVAILABLE",
        "the database is unavailable, so this token cannot be checked now; try again shortly",
        {"dependency": "database"},
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def _failed(throttle: AuthThrottle, client: str, now: float) -> None:
    """A wrong token: counted, and logged as a security event (at most `limit` lines per
    client per window: once throttled, its requests are refused without a line each)."""
    failures = throttle.failed(client, now)
    metrics.count_auth_failure("refused")
    log.warning(
        "authentication failed (SEC5)",
        extra={
            "security_event": "auth_failed", "client": client, "failures": failures,
            "throttled": throttle.retry_after(client, now) > 0,
        },
    )  # fmt: skip


CurrentUser = Annotated[auth.Principal, Depends(_current_user)]
