"""How the gateway is served: uvicorn, with a bound on how long a client may take to send its
request (SPEC O5).

uvicorn bounds only the idle time between requests (`timeout_keep_alive`); a client that sends
part of the headers, or declares `Content-Length: 1000` and sends 10 bytes, would hold its
connection (and, with a body, a request task) for as long as it likes. `TimedHttpToolsProtocol`
adds two deadlines per request, both from the moment it starts:

  * the headers complete within `header_timeout_s` (a connection that sends nothing at all is
    closed after it too);
  * the body complete within `body_timeout_s` of the headers (a 512 KiB submit needs ≥ 17 KiB/s).

On either, the client gets 408 REQUEST_TIMEOUT in the SPEC §8 shape (unless a response already
started) and the connection is closed; the route reading the body sees a disconnect. Both are
`JPU_GATEWAY_HEADER_TIMEOUT_S` / `JPU_GATEWAY_BODY_TIMEOUT_S` (seconds).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from typing import Any, Final

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_TIMEOUT_S: Final = 10.0
BODY_TIMEOUT_S: Final = 30.0


def _timeout(env: Mapping[str, str], key: str, default: float) -> float:
    raw = env.get(key, "").strip()
    if not raw:
        return default
    value = float(raw)
    if not 0 < value < 86400:
        raise ValueError(f"{key} must be a number of seconds > 0, not {raw!r}")
    return value


def _timeout_response() -> bytes:
    body = json.dumps(
        {
            "error": {
                "code": "REQUEST_TIMEOUT",
                "message": "the request was not received in time",
                "details": {},
            }
        }
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


_TIMEOUT_RESPONSE: Final = _timeout_response()


class TimedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the header and body deadlines described above."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_deadline: asyncio.TimerHandle | None = None

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._read_deadline = self.loop.call_later(seconds, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _read_timed_out(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or not self.cycle.response_started:  # else: just close
            self.transport.write(_TIMEOUT_RESPONSE)
        self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.header_timeout_s)  # even a connection that never sends a byte

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm(self.header_timeout_s)

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._arm(self.body_timeout_s)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def protocol_class(
    header_timeout_s: float = HEADER_TIMEOUT_S, body_timeout_s: float = BODY_TIMEOUT_S
) -> type[TimedHttpToolsProtocol]:
    """The protocol class with these deadlines (uvicorn instantiates it per connection)."""
    return type(
        "TimedHttpToolsProtocol",
        (TimedHttpToolsProtocol,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )


def uvicorn_config(
    app: Any,
    host: str,
    port: int,
    *,
    env: Mapping[str, str] | None = None,
    header_timeout_s: float | None = None,
    body_timeout_s: float | None = None,
    **overrides: Any,
) -> uvicorn.Config:
    """The one uvicorn configuration of the gateway (its __main__ and the tests serve with it)."""
    env = os.environ if env is None else env
    headers = header_timeout_s or _timeout(env, "JPU_GATEWAY_HEADER_TIMEOUT_S", HEADER_TIMEOUT_S)
    body = body_timeout_s or _timeout(env, "JPU_GATEWAY_BODY_TIMEOUT_S", BODY_TIMEOUT_S)
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_config": None,
        "access_log": False,
        "lifespan": "on",
        "timeout_graceful_shutdown": 10,
        "timeout_keep_alive": 5,
        "http": protocol_class(headers, body),
        **overrides,
    }
    return uvicorn.Config(app, **options)
