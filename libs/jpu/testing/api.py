"""Helpers for the REST API tests: the demo users' tokens, the `Authorization` header, the SPEC §8
error shape, and `Api` — what the `api` fixture (jpu.testing.api_fixtures) hands a test: the
real gateway app over ASGI with the real intake, on real NATS JetStream + PostgreSQL."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import msgspec

from jpu.bus import EventBus
from jpu.config import Config
from jpu.events import Event, new_event_id
from jpu.runtime.clock import FakeClock
from jpu.store import auth
from jpu.store.projection import wait_applied
from jpu.tools.identities import Identities

T0 = 1_700_000_000.0  # the FakeClock's start: event times in tests are near it
TOKENS = {
    "alice": "demo-bcg-alice",
    "bob": "demo-bcg-bob",  # lab BCG, role user
    "carol": "demo-kdg-carol",  # lab KDG, role user
    "admin": "demo-admin",  # lab BCG, role admin
    "zoe": "demo-bcg-zoe",  # lab BCG, max_active_jobs 0: her jobs stay in the personal queue
}
DEFAULT_NODES = {
    "gpu-4090x2-01": "rtx4090",
    "gpu-4090x2-02": "rtx4090",
    "gpu-3080tix2-01": "rtx3080ti",
    "gpu-3080tix2-02": "rtx3080ti",
}


def token_of(who: str) -> str:
    """The token of a short name of TOKENS ("alice"), else an account's demo token ("bcg-alice",
    "bcg-lead": `demo-<account>`)."""
    return TOKENS.get(who) or auth.demo_token(who)


def bearer(who: str = "", *, token: str | None = None) -> dict[str, str]:
    """The `Authorization` header of `who` (token_of), or of `token` as it is."""
    return {"Authorization": f"Bearer {token if token is not None else token_of(who)}"}


def assert_error(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """SPEC §8: every error is `{"error": {"code", "message", "details"}}`."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code, body
    assert body["error"]["message"]
    return dict(body["error"])


@dataclass
class Api:
    client: httpx.AsyncClient
    app: Any
    bus: EventBus  # the test's own connection, to append facts other services would
    pool: asyncpg.Pool
    config: Config
    clock: FakeClock

    async def append(self, *events: Event, projection: str = "jobs") -> int:
        seq = 0
        for e in events:
            seq = await self.bus.append(e)
        await wait_applied(self.pool, projection, seq, timeout=15)
        return seq

    async def decide(self) -> None:
        """What the leading dispatcher publishes after a cycle on the log as it is now: the
        policy's order and pending reasons (D1, D7), through its own ViewPublisher. The gateway
        shows ranks and reasons from there only (SPEC D7); these tests run no
        dispatcher, so that its appends do not move the jobs they arrange."""
        from jpu.domain.cluster import ClusterState, evolve
        from jpu.domain.dispatch import snapshot
        from jpu.policy.cycle import cycle
        from jpu_services.dispatcher.view import ViewPublisher

        state = ClusterState.new(self.config)
        async for d in self.bus.replay():
            evolve(state, d)
        now = self.clock.now()
        result = cycle(snapshot(state, self.config), now)
        publisher = ViewPublisher(self.bus)
        await publisher.publish(now, state.seq, result.order, dict(result.pending.items()))

    def kw(self, dt: float = 0.0) -> dict[str, Any]:
        return {"event_id": new_event_id(), "ts": self.clock.now() + dt}

    async def submit(
        self, who: str, body: dict[str, Any], key: str | None = None
    ) -> httpx.Response:
        headers = bearer(who) | ({"Idempotency-Key": key} if key else {})
        return await self.client.post("/v1/jobs", json=body, headers=headers)


def job_body(**over: Any) -> dict[str, Any]:
    return {"name": "train", "command": "python train.py", "num_gpus": 1, **over}


def to_builtins(e: Event) -> dict[str, Any]:
    return dict(msgspec.to_builtins(e))


async def add_lab_admins(bus: EventBus, pool: asyncpg.Pool, now: float | None = None) -> None:
    """bcg-lead and kdg-lead: a lab_admin of BCG and one of KDG, with `demo-<name>` tokens,
    as the admin tool adds them (identity events, SEC3), applied by the running projector.
    `now`: the log's clock (a test's fake one), else the wall clock."""
    ids = Identities(bus, pool, time.time() if now is None else now, by="tests")
    for name, lab in (("bcg-lead", "BCG"), ("kdg-lead", "KDG")):
        await ids.add_user(name, lab, "lab_admin")
        await ids.install_token(name, f"demo-{name}")
