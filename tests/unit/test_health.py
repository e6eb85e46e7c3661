"""`python -m jpu.runtime.health`, the service image's container health check (SPEC O4)."""

from __future__ import annotations

import os
from pathlib import Path

from jpu.runtime.health import STALE_AFTER_S, healthy


def test_health_worker_heartbeat_fresh_then_stale_O4(tmp_path: Path) -> None:
    beat = tmp_path / "heartbeat"
    beat.touch()
    os.utime(beat, (1000.0, 1000.0))
    env = {"JPU_HEARTBEAT_FILE": str(beat)}
    assert healthy(env, now=1000.0 + STALE_AFTER_S - 1)[0]
    ok, why = healthy(env, now=1000.0 + STALE_AFTER_S + 1)
    assert not ok and "touched 31 s ago" in why


def test_health_is_unhealthy_without_a_heartbeat_or_url_O4(tmp_path: Path) -> None:
    ok, why = healthy({"JPU_HEARTBEAT_FILE": str(tmp_path / "none")}, now=0.0)
    assert not ok and "No such file" in why  # not connected yet: no file
    assert not healthy({}, now=0.0)[0]


def test_health_gateway_url_that_refuses_is_unhealthy_O4() -> None:
    ok, why = healthy({"JPU_HEALTH_URL": "http://127.0.0.1:9/readyz"}, now=0.0)
    assert not ok and "127.0.0.1:9" in why
