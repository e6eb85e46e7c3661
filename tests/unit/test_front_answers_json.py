"""The front (compose/haproxy.cfg) answers in the API's own JSON error envelope (SPEC §8, O5)
when no gateway is behind it, so the CLI shows the message, not an HTML page. Checked live
against Debian's HAProxy 2.6 when this was written (docs/operations.md); here: every status the
front can answer by itself has its JSON, and the CLI reads it as the API's."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import httpx
import pytest

from jpu.cli.rest.client import ApiError, decode

CFG = Path(__file__).resolve().parents[2] / "compose" / "haproxy.cfg"


def _http_errors() -> dict[int, tuple[dict[str, str], str]]:
    out = {}
    for line in CFG.read_text().splitlines():
        words = shlex.split(line.strip(), comments=True)
        if words[:2] == ["http-error", "status"]:
            status, rest = int(words[2]), words[3:]  # content-type T string S hdr N V
            assert rest[0::2][:3] == ["content-type", "string", "hdr"], line
            headers = {"content-type": rest[1], rest[5]: rest[6]}
            out[status] = (headers, rest[3])
    return out


def test_O5_front_answers_its_own_errors_as_the_api_envelope() -> None:
    errors = _http_errors()
    assert set(errors) == {502, 503, 504}
    for status, (headers, body) in errors.items():
        assert headers["content-type"] == "application/json"
        assert int(headers["Retry-After"]) > 0
        envelope = json.loads(body)["error"]
        assert envelope["code"] == "SERVICE_UNAVAILABLE" and envelope["message"], status
        answer = httpx.Response(
            status, content=body.encode(), headers=headers,
            request=httpx.Request("GET", "http://front:8080/v1/maintenance/status"),
        )  # fmt: skip
        with pytest.raises(ApiError) as raised:
            decode(answer)
        assert raised.value.details == {"dependency": "gateway"}
