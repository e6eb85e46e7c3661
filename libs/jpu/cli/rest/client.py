"""The CLI's only way to the platform: the REST API (SPEC U1, §8).

Where to talk and who we are, first found wins: the `--url`/`--token` flags, `JPU_URL`/`JPU_TOKEN`,
then `url`/`token` in `$XDG_CONFIG_HOME/jpu/config.toml` (default `~/.config/jpu/config.toml`),
then `http://127.0.0.1:8080` (no token).
"""

from __future__ import annotations

import contextlib
import os
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from jpu.cli import messages

DEFAULT_URL = "http://127.0.0.1:8080"


class RestError(Exception):
    """A failure the user reads as one line (unreachable server, unexpected answer)."""


class StreamBroken(RestError):
    """The connection broke while a streamed answer was being read (it had begun: 2xx)."""


class ApiError(RestError):
    """The API refused: SPEC §8's envelope `{"error": {"code", "message", "details"}}`."""

    def __init__(self, status: int, code: str, message: str, details: Mapping[str, Any]) -> None:
        self.status, self.code, self.message, self.details = status, code, message, dict(details)
        super().__init__(messages.api_error(code, message, self.details))  # with the fix


@dataclass(frozen=True)
class Target:
    url: str
    token: str | None


def config_file(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CONFIG_HOME") or str(Path(env.get("HOME", "~")).expanduser() / ".config")
    return Path(base) / "jpu" / "config.toml"


def _file_settings(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise RestError(f"cannot read {path}: {e}") from e


def resolve_target(
    url: str | None = None, token: str | None = None, env: Mapping[str, str] | None = None
) -> Target:
    env = os.environ if env is None else env
    file: dict[str, Any] = {}
    if not (url or env.get("JPU_URL")) or not (token or env.get("JPU_TOKEN")):
        file = _file_settings(config_file(env))
    return Target(
        url=(url or env.get("JPU_URL") or file.get("url") or DEFAULT_URL).rstrip("/"),
        token=token or env.get("JPU_TOKEN") or file.get("token") or None,
    )


class RestClient:
    def __init__(
        self, target: Target, *, transport: httpx.BaseTransport | None = None, timeout: float = 30
    ) -> None:
        headers = {"Accept": "application/json", "User-Agent": "jpu-cli"}
        if target.token:
            headers["Authorization"] = f"Bearer {target.token}"
        self.target = target
        self._http = httpx.Client(
            base_url=target.url, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> RestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    def get(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._send("GET", path, params=params)

    def post(self, path: str, body: Any, headers: Mapping[str, str] | None = None) -> Any:
        return self._send("POST", path, json=body, headers=headers)

    def put(self, path: str, body: Any) -> Any:
        return self._send("PUT", path, json=body)

    def delete(self, path: str, params: Mapping[str, Any] | None = None) -> Any:
        return self._send("DELETE", path, params=params)

    @contextlib.contextmanager
    def stream(
        self,
        path: str,
        params: Mapping[str, Any] | None = None,
        *,
        follow: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> Iterator[httpx.Response]:
        """GET with the body read as it arrives (`iter_bytes`); an error answer raises ApiError
        before anything is yielded. `follow`: no read timeout (output may pause for hours)."""
        timeout = httpx.Timeout(self._http.timeout.connect or 30, read=None) if follow else None
        kw: dict[str, Any] = {"params": params, "headers": headers}
        if timeout is not None:
            kw["timeout"] = timeout
        try:
            with self._http.stream("GET", path, **kw) as response:
                if not response.is_success:
                    response.read()
                    decode(response)  # raises: an error envelope, or not a success
                try:
                    yield response
                except httpx.HTTPError as e:
                    raise StreamBroken(f"the answer from {self.target.url} broke off: {e}") from e
        except httpx.HTTPError as e:
            raise RestError(f"cannot reach {self.target.url}: {e}") from e

    def _send(self, method: str, path: str, **kw: Any) -> Any:
        try:
            response = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise RestError(f"cannot reach {self.target.url}: {e}") from e
        return decode(response)


def decode(response: httpx.Response) -> Any:
    """The JSON body of a success; ApiError from an error envelope; RestError otherwise."""
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.is_success:
        if body is None and response.content:
            raise RestError(f"HTTP {response.status_code}: the answer is not JSON")
        return body
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and "code" in error:
        raise ApiError(
            response.status_code,
            str(error["code"]),
            str(error.get("message", "")),
            error.get("details") or {},
        )
    if body is None and response.content:  # never the proxy's HTML on the user's terminal
        raise RestError(not_the_api(response))
    text = response.text.strip().replace("\n", " ")[:200]
    raise RestError(f"HTTP {response.status_code}: {text or response.reason_phrase}")


# A proxy or load balancer in front of the gateways answers these itself when none answers.
_PROXY_STATUSES = {502: "bad gateway", 503: "no gateway available", 504: "gateway timeout"}


def not_the_api(response: httpx.Response) -> str:
    """One line for an error answer that is not JSON (an HTML page from HAProxy, nginx, an
    ingress): who answered, what it means, and when to try again — never the page itself."""
    status = response.status_code
    kind = response.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    try:
        host = response.request.url.host
    except RuntimeError:  # a response built without its request (tests, replays)
        host = "the server"
    meaning = _PROXY_STATUSES.get(status)
    what = f" ({meaning})" if meaning else ""
    line = (
        f"HTTP {status}{what} from {host}: the answer is {kind}, not the JPU-Share API's JSON, "
        "so a proxy or load balancer in front of the gateways answered"
    )
    if meaning:
        wait = response.headers.get("retry-after", "").strip()
        after = f" in {wait} s" if wait.isdigit() else " shortly"
        line += f"; the platform may be restarting: try again{after}"
    else:
        line += "; check the URL (--url, JPU_URL)"
    return line
