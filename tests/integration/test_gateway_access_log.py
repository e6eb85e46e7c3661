"""The gateway's access log (SPEC O4): one structured line per request — method, the route's
path template, status, duration, the caller's user name — and never a token."""

from __future__ import annotations

import json
import logging

import pytest

from jpu.runtime.service import JsonFormatter
from jpu.testing.api import TOKENS, Api

ALICE = {"Authorization": f"Bearer {TOKENS['alice']}"}


async def test_O4_gateway_logs_one_line_per_request_without_tokens(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="jpu.gateway.access")
    c = api.client
    r = await c.post("/v1/jobs", json={"command": "echo hi", "num_gpus": 1}, headers=ALICE)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert (await c.get(f"/v1/jobs/{job_id}", headers=ALICE)).status_code == 200
    wrong = {"Authorization": "Bearer not-a-real-token-7f3a"}
    assert (await c.get("/v1/me", headers=wrong)).status_code == 401
    assert (await c.get(f"/nowhere/{TOKENS['bob']}?token=x")).status_code == 404
    assert (await c.get("/healthz")).status_code == 200

    lines = [
        json.loads(JsonFormatter("gateway").format(rec))
        for rec in caplog.records
        if rec.name == "jpu.gateway.access"
    ]
    seen = [(x["method"], x["path"], x["status"], x["user"]) for x in lines]
    assert seen == [
        ("POST", "/v1/jobs", 201, "bcg-alice"),
        ("GET", "/v1/jobs/{job_id}", 200, "bcg-alice"),
        ("GET", "/v1/me", 401, "-"),
        ("GET", "<unmatched>", 404, "-"),
        ("GET", "/healthz", 200, "-"),
    ], seen
    assert all(isinstance(x["duration_ms"], float) and x["duration_ms"] >= 0 for x in lines)
    assert [x["level"] for x in lines][-1] == "debug"  # probes: not at INFO
    text = "\n".join(json.dumps(x) for x in lines)
    for secret in (TOKENS["alice"], TOKENS["bob"], "not-a-real-token-7f3a", job_id):
        assert secret not in text, secret
