"""SPEC §8 auth and the web console (U2), through HTTP against the real stack."""

from __future__ import annotations

import pytest

from jpu.testing.api import Api, assert_error, bearer
from jpu_services.gateway.routes import console

PROTECTED = [
    ("GET", "/v1/jobs"),
    ("POST", "/v1/jobs"),
    ("GET", "/v1/jobs/x"),
    ("GET", "/v1/jobs/x/events"),
    ("POST", "/v1/jobs/x/cancel"),
    ("GET", "/v1/queue"),
    ("GET", "/v1/labs"),
    ("GET", "/v1/labs/BCG"),
    ("GET", "/v1/placements"),
    ("GET", "/v1/backfill"),
    ("GET", "/v1/usage/history"),
    ("POST", "/v1/admin/maintenance"),
]


@pytest.mark.parametrize(("method", "path"), PROTECTED)
async def test_A_401_without_token(api: Api, method: str, path: str) -> None:
    for headers in ({}, bearer(token="not-a-token"), {"Authorization": "Token demo-bcg-alice"}):
        r = await api.client.request(method, path, headers=headers, json={})
        err = assert_error(r, 401, "UNAUTHENTICATED")
        assert "token" in err["message"]


async def test_A_openapi_lists_every_endpoint(api: Api) -> None:
    paths = set((await api.client.get("/openapi.json")).json()["paths"])
    assert {
        "/v1/jobs",
        "/v1/jobs/{job_id}",
        "/v1/jobs/{job_id}/events",
        "/v1/jobs/{job_id}/cancel",
        "/v1/queue",
        "/v1/labs",
        "/v1/labs/{lab}",
        "/v1/placements",
        "/v1/admin/maintenance",
        "/v1/backfill",
    } <= paths


async def test_U2_console_page_has_banner_and_both_languages(api: Api) -> None:
    page = await api.client.get("/")  # no token needed to load the page itself
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="maintenance-banner"' in page.text  # SPEC M5
    assert '<script type="module" src="/console/main.js">' in page.text  # it imports the rest
    # the page runs only the gateway's own files: no inline script, nothing from elsewhere
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert page.text.count("<script") == page.text.count('<script type="module" src="/console/')
    js = await api.client.get("/console/main.js")
    assert js.status_code == 200 and "javascript" in js.headers["content-type"]
    text = ""
    for module in console.MODULES:  # each served as JavaScript, or the browser refuses a module
        got = await api.client.get(f"/console/{module}")
        assert got.status_code == 200 and "javascript" in got.headers["content-type"], module
        text += got.text
    for needle in (
        "/v1/maintenance/status",
        "/v1/queue",
        "/v1/placements",
        "/v1/labs",
        "/v1/usage/history",
        "/events",
        "localStorage",
        "점검",
        "대기열",
    ):
        assert needle in text, needle
    css = await api.client.get("/console/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert_error(await api.client.get("/console/../app.py"), 404, "NOT_FOUND")
    assert_error(await api.client.get("/console/secret.txt"), 404, "NOT_FOUND")
