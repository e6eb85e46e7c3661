"""Local receivers for the notifier's tests (SPEC Q10): a real SMTP server (aiosmtpd) and a
Slack-style webhook over HTTP, each recording what arrived."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from jpu.embedded.base import free_port


class Received:
    """What a receiver got, with an optional hook run on each arrival before it answers."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.on_arrival: Callable[[dict[str, Any]], None] | None = None

    def add(self, item: dict[str, Any]) -> None:
        with self.lock:
            self.items.append(item)
        if self.on_arrival is not None:
            self.on_arrival(item)

    def texts(self) -> list[str]:
        with self.lock:
            return [i["text"] for i in self.items]


class SmtpHandler:
    def __init__(self, got: Received) -> None:
        self.got = got

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        msg = message_from_bytes(envelope.content)
        payload = msg.get_payload(decode=True)
        assert isinstance(payload, bytes), payload
        body = payload.decode().strip()
        self.got.add({"to": envelope.rcpt_tos, "subject": msg["Subject"], "text": body,
                      "key": msg["X-JPU-Notification"]})  # fmt: skip
        return "250 OK"


class Webhook:
    """A Slack-style receiver on a fixed port that can go down and come back."""

    def __init__(self) -> None:
        self.port = free_port()
        self.got = Received()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def start(self) -> None:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                got.add({"text": data["text"], "path": self.path})
                try:
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender died waiting (a test kills it here): it has been received

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


async def until(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)
