"""SPEC SEC4, webhooks: the attack of issue 33 (a lab member's webhook aimed at loopback, the
platform's NATS port, `0`, `localhost`, the metadata address) against the real gateway (PUT: 422
naming `webhook_url`, nothing appended) and the real notifier process (at send: nothing POSTed,
the notification abandoned at once). Every listener here is on 127.0.0.1; nothing leaves the
machine.
"""

from __future__ import annotations

import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from jpu.bus import EventBus
from jpu.testing.api import Api, assert_error, bearer
from jpu.testing.notifier import Notifier, started
from jpu.testing.notifier import job_ended as _end
from jpu.testing.notifier import job_submitted as _job
from jpu.testing.notifier import notification_settings as _settings
from jpu.testing.receivers import Received, Webhook, until

REFUSED = [
    "http://127.0.0.1:4222/",  # the platform's NATS port
    "http://[::1]:8080/v1/jobs?x=1",
    "http://0:8080/",
    "http://localhost:5432/",
    "http://169.254.169.254/latest/meta-data/",
    "http://2130706433/",
    "http://10.1.2.3/",
    "http://[fd00::1]/",
    "http://224.0.0.251/",
]


@pytest.mark.parametrize("url", REFUSED)
async def test_put_webhook_to_local_private_or_metadata_address_is_422_SEC4(
    api: Api,
    url: str,
) -> None:
    r = await api.client.put(
        "/v1/me/notifications", json={"webhook_url": url}, headers=bearer("alice")
    )
    err = assert_error(r, 422, "VALIDATION_ERROR")
    assert err["details"]["field"] == "webhook_url", err
    got = await api.client.get("/v1/me/notifications", headers=bearer("alice"))
    assert got.json()["seq"] == 0  # nothing appended


async def test_put_public_webhook_still_accepted_SEC4(api: Api) -> None:
    body = {"webhook_url": "https://hooks.example/T/B/x"}  # a reserved name: no DNS query
    r = await api.client.put("/v1/me/notifications", json=body, headers=bearer("alice"))
    assert r.status_code == 200, r.text


def _loopback_name() -> str:
    """A name this machine's /etc/hosts maps to a loopback address (not `localhost`, refused by
    name): resolving it sends nothing over the network, and only resolving it reveals loopback."""
    for line in Path("/etc/hosts").read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[0].startswith("127."):
            for name in fields[1:]:
                if "localhost" not in name and "." not in name:
                    return name
    pytest.skip("no loopback name besides localhost in /etc/hosts")


async def test_put_webhook_whose_name_resolves_to_loopback_is_422_SEC4(
    api: Api,
) -> None:
    url = f"http://{_loopback_name()}:4222/"
    r = await api.client.put(
        "/v1/me/notifications", json={"webhook_url": url}, headers=bearer("alice")
    )
    err = assert_error(r, 422, "VALIDATION_ERROR")
    assert err["details"]["field"] == "webhook_url" and "loopback" in err["message"], err


class _Recorder:
    """A loopback HTTP listener that records each request's Host header and path, and answers
    with `status` (a redirect to `location` when given); with `tls` (cert, key) an HTTPS one that
    also records the TLS server name (SNI) each client asked for."""

    def __init__(
        self, status: int = 200, location: str = "", tls: tuple[Path, Path] | None = None
    ) -> None:
        self.got: list[dict[str, str]] = []
        self.sni: list[str | None] = []
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"] or 0))
                got.append({"host": self.headers["Host"], "path": self.path})
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*tls)

            def record_sni(_sock: ssl.SSLSocket, name: str | None, _ctx: ssl.SSLContext) -> None:
                self.sni.append(name)

            ctx.sni_callback = record_sni
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    r = _Recorder()
    try:
        yield r
    finally:
        r.close()


def _notifier(
    nats_url: str, bus: EventBus, pg_dsn: str, smtp_port: int, tmp: Path, allow: bool
) -> Notifier:
    n = Notifier(nats_url, bus, pg_dsn, smtp_port, tmp / "notifier.log")
    if not allow:  # the site's default: no network allowed beyond the global ones
        n.env.pop("JPU_WEBHOOK_ALLOW_NETWORKS")
    return n


async def _webhook_rows(pg_dsn: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(pg_dsn)
    try:
        return await conn.fetch(
            "SELECT state, attempts, last_error FROM notification_sent WHERE channel = 'webhook'"
        )
    finally:
        await conn.close()


async def _run_one_job(bus: EventBus, hook_url: str, job: str) -> None:
    for e in (_settings(hook_url, ["END"]), _job(job, 1.0), _end(job, 2.0, "CANCELLED")):
        await bus.append(e)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "resolved"])
async def test_notifier_refuses_a_loopback_webhook_at_send_never_posts_SEC4(
    nats_url: str,
    bus: EventBus,
    pg_dsn: str,
    smtp: tuple[int, Received],
    webhook: Webhook,
    tmp_path: Path,
    host: str,
) -> None:
    """Settings already on the log (set before the rule, or a name that resolved elsewhere at
    PUT) still cannot make the notifier POST to this machine: refused, abandoned, not retried."""
    host = _loopback_name() if host == "resolved" else host  # refused only once resolved
    webhook.start()  # a loopback listener: what the attacker aims at
    n = _notifier(nats_url, bus, pg_dsn, smtp[0], tmp_path, allow=False)
    try:
        await started(n, pg_dsn)
        await _run_one_job(bus, f"http://{host}:{webhook.port}/hook?evil=1", "j1")
        await until(lambda: _abandoned(pg_dsn), "the webhook notification abandoned")
        await until(lambda: _async(bool(smtp[1].items)), "the e-mail of the same event")
        rows = await _webhook_rows(pg_dsn)
        assert [(r["state"], r["attempts"]) for r in rows] == [("abandoned", 1)]
        assert "webhook refused" in rows[0]["last_error"]
        assert webhook.got.items == []  # nothing reached the listener
        logged = n.log.read_text()  # a security event, as a JSON field
        assert "webhook refused (SEC4)" in logged
        assert '"security_event": "webhook_refused"' in logged
    finally:
        n.stop()


async def test_notifier_follows_no_redirect_SEC4(
    nats_url: str,
    bus: EventBus,
    pg_dsn: str,
    smtp: tuple[int, Received],
    webhook: Webhook,
    tmp_path: Path,
) -> None:
    """An allowed receiver answering 307 towards another listener: the notifier does not go."""
    webhook.start()
    hop = _Recorder(status=307, location=webhook.url)
    n = _notifier(nats_url, bus, pg_dsn, smtp[0], tmp_path, allow=True)
    try:
        await started(n, pg_dsn)
        await _run_one_job(bus, f"http://127.0.0.1:{hop.port}/hook", "j2")
        await until(lambda: _async(len(hop.got) >= 2), "two tries of the redirecting receiver")
        assert webhook.got.items == []
        assert all(r["state"] != "sent" for r in await _webhook_rows(pg_dsn))
    finally:
        n.stop()
        hop.close()


async def test_notifier_pins_the_checked_address_keeps_the_host_header_SEC4(
    nats_url: str,
    bus: EventBus,
    pg_dsn: str,
    smtp: tuple[int, Received],
    recorder: _Recorder,
    tmp_path: Path,
) -> None:
    """Allowed by the site (127.0.0.0/8), `localhost` is resolved once, checked, and the POST
    goes to that address with the URL's own Host header."""
    n = _notifier(nats_url, bus, pg_dsn, smtp[0], tmp_path, allow=True)
    try:
        await started(n, pg_dsn)
        await _run_one_job(bus, f"http://localhost:{recorder.port}/hook", "j3")
        await until(lambda: _async(bool(recorder.got)), "the POST")
        assert recorder.got[0] == {"host": f"localhost:{recorder.port}", "path": "/hook"}
    finally:
        n.stop()


async def test_notifier_pins_https_with_the_urls_tls_name_SEC4(
    nats_url: str,
    bus: EventBus,
    pg_dsn: str,
    smtp: tuple[int, Received],
    tmp_path: Path,
) -> None:
    """HTTPS to a pinned address: SNI and the certificate check still use the URL's name (a
    certificate for `localhost` only, trusted through SSL_CERT_FILE), so a pinned send to a
    real https receiver works, and the receiver sees which name was asked for."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", str(key), "-out", str(cert)],
        capture_output=True, check=True,
    )  # fmt: skip
    tls = _Recorder(tls=(cert, key))
    n = _notifier(nats_url, bus, pg_dsn, smtp[0], tmp_path, allow=True)
    n.env["SSL_CERT_FILE"] = str(cert)
    try:
        await started(n, pg_dsn)
        await _run_one_job(bus, f"https://localhost:{tls.port}/hook", "j4")
        await until(lambda: _async(bool(tls.got)), "the POST over TLS")
        assert tls.got[0] == {"host": f"localhost:{tls.port}", "path": "/hook"}
        assert tls.sni[0] == "localhost"
    finally:
        n.stop()
        tls.close()


async def _async(value: bool) -> bool:
    return value


async def _abandoned(pg_dsn: str) -> bool:
    return any(r["state"] == "abandoned" for r in await _webhook_rows(pg_dsn))
