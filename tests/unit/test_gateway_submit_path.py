"""The submit path's helpers: the gateway's token cache and the stack's gateway workers."""

from __future__ import annotations

from pathlib import Path

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
