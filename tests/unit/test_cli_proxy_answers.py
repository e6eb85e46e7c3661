"""The CLI never prints a proxy's HTML (SPEC O5, U1): an error answer that is not the API's JSON
envelope is one line saying who answered and what to do."""

from __future__ import annotations

import httpx
import pytest

from jpu.cli.rest import jobviews
from jpu.cli.rest.client import ApiError, RestError, decode

# HAProxy's own 503 page, as its front answered on every route when no gateway was in rotation
HAPROXY_503 = (
    "<html><body><h1>503 Service Unavailable</h1>\n"
    "No server is available to handle this request.\n</body></html>\n"
)


def _answer(status: int, body: str, content_type: str, **headers: str) -> httpx.Response:
    request = httpx.Request("POST", "http://jpu.example.edu:8080/v1/jobs")
    return httpx.Response(
        status,
        content=body.encode(),
        headers={"content-type": content_type, **headers},
        request=request,
    )


def test_O5_cli_says_a_proxy_answered_instead_of_printing_its_html() -> None:
    with pytest.raises(RestError) as raised:
        decode(_answer(503, HAPROXY_503, "text/html", **{"Retry-After": "5"}))
    line = str(raised.value)
    assert "<" not in line and "No server is available" not in line, line
    assert line.startswith("HTTP 503 (no gateway available) from jpu.example.edu"), line
    assert "text/html" in line and "proxy or load balancer" in line
    assert line.endswith("try again in 5 s"), line
    assert "\n" not in line


def test_O5_cli_points_at_the_url_when_a_non_api_server_refuses() -> None:
    with pytest.raises(RestError) as raised:
        decode(_answer(404, "<html>Not Found</html>", "text/html; charset=utf-8"))
    line = str(raised.value)
    assert "<" not in line and "HTTP 404 from jpu.example.edu" in line
    assert line.endswith("check the URL (--url, JPU_URL)"), line


def test_O5_cli_still_reads_the_apis_own_503() -> None:
    envelope = (
        '{"error": {"code": "SERVICE_UNAVAILABLE", "message": "the database is unavailable",'
        ' "details": {"dependency": "database"}}}'
    )
    with pytest.raises(ApiError) as raised:
        decode(_answer(503, envelope, "application/json"))
    assert raised.value.code == "SERVICE_UNAVAILABLE"
    assert raised.value.details == {"dependency": "database"}


def test_O5_jpu_show_says_the_job_came_from_the_log() -> None:
    # what GET /v1/jobs/{id} answers while the database is away (routes/_jobview.from_log)
    from_log = {
        "id": "c38d7644fbba42518c937001", "name": "train", "user": "bcg-alice", "lab": "BCG",
        "num_gpus": 1, "state": "RUNNING", "attempt": 1, "submitted_at": 1796432000.0,
        "queue_entered_at": 1796432000.5, "dispatched_at": 1796432001.0,
        "started_at": 1796432002.0, "backend_job_id": None, "from_log": True,
        "placement": {"node": "gpu-4090x2-01", "tier": "rtx4090", "gpus": [0]},
        "degraded": "the database is unavailable (OSError): the job as its events in the log say",
    }  # fmt: skip
    shown = jobviews.job(from_log)
    assert "State: RUNNING" in shown
    assert "gpu-4090x2-01 rtx4090 gpus=0" in shown
    assert "the database is unavailable (OSError)" in shown
