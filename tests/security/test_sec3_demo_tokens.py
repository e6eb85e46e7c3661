"""SPEC SEC3: demo identities exist only in the demo (`make run`), and a revoked token stays
revoked — the finding: `jpu.tools.admin token revoke admin` held until the next `make run`, whose
`prepare` re-seeded `demo-admin` (install_token reset `revoked_at`); compose ran the same
`prepare`, so a deployment shipped well-known tokens. Real NATS, PostgreSQL and gateway app."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest_asyncio
import yaml

from jpu.bus import EventBus
from jpu.config import Config, load_config
from jpu.stack.prepare import prepare
from jpu.store import auth
from jpu.store.projection import wait_applied
from jpu.testing.nats_fixtures import unique_names
from jpu.tools.admin import DEMO_ADMIN, DEMO_LABS
from jpu_services.gateway.app import create_app
from jpu_services.gateway.config import GatewayConfig

ROOT = Path(__file__).resolve().parents[2]
DEMO_NAMES = {DEMO_ADMIN[0], *(u for users in DEMO_LABS.values() for u in users)}


@pytest_asyncio.fixture
async def env(nats_url: str, pg_dsn: str) -> AsyncIterator[dict[str, str]]:
    stream, prefix = unique_names()
    yield {
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": pg_dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
    }
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix, name="pytest-sec3")
    try:
        await bus.delete_stream()
    finally:
        await bus.close()


async def me_status(config: Config, token: str) -> int:
    """GET /v1/me on a freshly started gateway (a restart: no token cache carried over), once
    its projector has folded every identity event of the log (SEC3: the tables are a fold)."""
    app = create_app(GatewayConfig.from_config(config, env={}))
    async with app.router.lifespan_context(app):
        edges = app.state.edges
        await wait_applied(edges.pool, "identities", await edges.bus.last_seq(), timeout=30)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
            r = await c.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
            return r.status_code


def run_module(module: str, *args: str, env: dict[str, str], cwd: Path) -> str:
    r = subprocess.run(
        [sys.executable, "-P", "-m", module, *args],
        env={**os.environ, **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


async def test_SEC3_a_revoked_demo_token_stays_revoked_across_restarts(
    env: dict[str, str], tmp_path: Path
) -> None:
    config = load_config(env=env)
    token = auth.demo_token(DEMO_ADMIN[0])
    assert [u.token for u in await prepare(config, demo=True) if u.role == "admin"] == [token]
    assert await me_status(config, token) == 200

    # no gateway runs between these restarts: the tool appends, the next gateway folds (SEC3)
    dsn = ("--database-url", env["JPU_DATABASE_URL"], "--no-wait")
    out = run_module("jpu.tools.admin", *dsn, "token", "revoke", "admin", env=env, cwd=tmp_path)
    assert "revoked 1 token(s)" in out

    # the next `make run`: its prepare seeds the demo again; then the explicit seed-demo
    await prepare(config, demo=True)
    assert await me_status(config, token) == 401
    run_module("jpu.tools.admin", *dsn, "seed-demo", env=env, cwd=tmp_path)
    assert await me_status(config, token) == 401
    # the other demo tokens were never revoked and still work
    assert await me_status(config, auth.demo_token("bcg-alice")) == 200


async def test_SEC3_a_deployment_prepare_seeds_no_demo_identity(
    env: dict[str, str], tmp_path: Path
) -> None:
    # What compose's and k8s's `prepare` run: `python -m jpu.stack prepare`, no --demo.
    out = run_module("jpu.stack", "prepare", env=env, cwd=tmp_path)
    assert "demo-" not in out
    assert "python -m jpu.tools.admin user add <NAME> --lab <LAB> --role admin" in out
    config = load_config(env=env)
    pool_names = {p.name for p, _ in await _users(config)}
    assert not pool_names & DEMO_NAMES
    for name in DEMO_NAMES:
        assert await me_status(config, auth.demo_token(name)) == 401


async def _users(config: Config) -> list[tuple[auth.Principal, int]]:
    from jpu.store.db import create_pool

    pool = await create_pool(config.database_url)
    try:
        return await auth.list_users(pool)
    finally:
        await pool.close()


def test_SEC3_compose_and_k8s_never_ask_for_the_demo() -> None:
    compose = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())
    assert compose["services"]["prepare"]["command"][-1] == "prepare"  # no --demo
    for path in [ROOT / "scripts" / "cluster", *sorted((ROOT / "k8s").glob("*.yaml"))]:
        text = path.read_text()
        assert "--demo" not in text and "seed-demo" not in text, path
        assert "demo-bcg-alice" not in text and "demo-admin" not in text, path
