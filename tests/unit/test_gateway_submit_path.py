"""The submit path's helpers: the gateway's token cache and the stack's gateway workers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jpu.stack.supervisor import Supervisor
from jpu.store import auth
from jpu_services.gateway.deps import TokenCache

ALICE = auth.Principal("bcg-alice", "BCG", "user", None)


def test_A_token_cache_keeps_accepted_tokens_for_ttl_only() -> None:
    # SPEC §8 (revoked → 401): a cached token is asked again once its entry is ttl_s old.
    cache = TokenCache(ttl_s=1.0)
    assert cache.get("t", now=10.0) is None  # never seen: the database decides
    cache.put("t", ALICE, now=10.0)
    assert cache.get("t", now=10.5) == ALICE
    assert cache.get("t", now=11.0) is None  # expired: looked up (and maybe refused) again
    assert cache.get("other", now=10.5) is None


def test_O5_token_cache_answers_for_a_lately_confirmed_token_while_the_database_is_away() -> None:
    # A database blip is not an outage: a token the database confirmed within the grace is
    # still accepted while it does not answer; an older or unknown one is not (503, not 401).
    cache = TokenCache(ttl_s=1.0, outage_grace_s=600.0)
    cache.put("t", ALICE, now=10.0)
    assert cache.get("t", now=20.0) is None  # normally: asked again
    assert cache.get_during_outage("t", now=20.0) == ALICE
    assert cache.get_during_outage("t", now=609.9) == ALICE
    assert cache.get_during_outage("t", now=610.0) is None  # confirmed too long ago
    assert cache.get_during_outage("never", now=20.0) is None


def test_A_token_cache_is_bounded() -> None:
    cache = TokenCache(ttl_s=60.0, max_entries=3)
    for i in range(3):
        cache.put(f"t{i}", ALICE, now=0.0)
    cache.put("t3", ALICE, now=0.0)  # full: starts over rather than growing
    assert cache.get("t0", now=1.0) is None
    assert cache.get("t3", now=1.0) == ALICE


async def test_A_token_cache_requests_that_miss_together_share_one_query() -> None:
    cache = TokenCache(ttl_s=1.0)
    asked: list[str] = []
    answer: asyncio.Future[auth.Principal | None] = asyncio.get_running_loop().create_future()

    async def query() -> auth.Principal | None:
        asked.append("t")
        return await answer

    first = cache.lookup("t", 10.0, query)
    second = cache.lookup("t", 10.5, query)  # expired together: joins the query in flight
    assert second is first
    answer.set_result(ALICE)
    assert await asyncio.shield(first) == ALICE and asked == ["t"]
    # cached as of when the database was asked, not when a request joined (SPEC §8 revoked)
    assert cache.get("t", now=10.9) == ALICE
    assert cache.get("t", now=11.0) is None


async def test_A_token_cache_never_joins_a_query_older_than_its_ttl() -> None:
    # SPEC §8 (revoked → 401): a query asked more than ttl_s ago may predate a revocation
    cache = TokenCache(ttl_s=1.0)
    slow: asyncio.Future[auth.Principal | None] = asyncio.get_running_loop().create_future()
    answers = iter([slow, None])

    async def query() -> auth.Principal | None:
        answer = next(answers)
        return answer if answer is None else await answer

    old = cache.lookup("t", 10.0, query)
    fresh = cache.lookup("t", 11.0, query)  # the revocation may be in between: asks anew
    assert fresh is not old
    assert await fresh is None  # refused, and a refusal is never cached
    slow.set_result(ALICE)
    await old
    assert cache.get("t", now=10.5) == ALICE and cache.get("t", now=11.0) is None


async def test_O5_token_cache_a_failed_query_fails_each_request_that_shared_it() -> None:
    cache = TokenCache(ttl_s=1.0)

    async def query() -> auth.Principal | None:
        raise ConnectionRefusedError("database away")

    first, second = cache.lookup("t", 10.0, query), cache.lookup("t", 10.1, query)
    assert second is first
    for _ in range(2):  # each request handles it on its own (deps._during_outage)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.shield(first)
    assert cache.get("t", now=10.2) is None
    assert cache.lookup("t", 10.2, query) is not first  # a new miss asks again


def test_E3_stack_gateway_workers_share_the_port_and_one_runs_projections(tmp_path: Path) -> None:
    sup = Supervisor({"JPU_GATEWAY_WORKERS": "3"}, tmp_path, ("gateway", "intake"))
    names = [c.name for c in sup.children]
    assert names == ["gateway", "gateway-2", "gateway-3", "intake"]
    gateways = [c for c in sup.children if c.name.startswith("gateway")]
    assert all(c.env["JPU_GATEWAY_REUSE_PORT"] == "1" for c in gateways)
    assert all((c.module or c.name) == "gateway" for c in gateways)
    # One consumer per projection durable (SPEC E3): only the first gateway runs the projector.
    assert "JPU_GATEWAY_PROJECTOR" not in gateways[0].env
    assert [c.env["JPU_GATEWAY_PROJECTOR"] for c in gateways[1:]] == ["0", "0"]


def test_stack_single_gateway_when_asked(tmp_path: Path) -> None:
    sup = Supervisor({"JPU_GATEWAY_WORKERS": "1"}, tmp_path, ("gateway",))
    [only] = sup.children
    assert only.name == "gateway" and only.env == {}
