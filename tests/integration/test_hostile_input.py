"""Hostile input over real HTTP (SPEC Q1, §8, E3, E6).

The real gateway app served by uvicorn exactly as `python -m jpu_services.gateway` serves it
(jpu_services.gateway.server), with the real intake and projections on real NATS JetStream and
PostgreSQL. Every refusal is asserted by status, §8 error code and the field it names, and by the
stream: its last sequence is the same after the request (nothing was appended, so nothing can
be parked by a projection later). A log the API accepted — edge values included — replays.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn

from jpu.bus import EventBus
from jpu.domain import limits
from jpu.events import JobSubmitted
from jpu.store.projection import wait_applied
from jpu.testing.api import TOKENS, Api, assert_error, bearer, job_body
from jpu.tools.identities import Identities
from jpu_services.gateway import server
from jpu_services.gateway.ratelimit import RateLimiter

Serve = Callable[..., Awaitable[str]]


@pytest_asyncio.fixture
async def serve(api: Api) -> AsyncIterator[Serve]:
    """Serve `api.app` over HTTP on a free port; returns the base URL. The submit rate limit
    is lifted: the table sends many submits, and the verdict under test is not RATE_LIMITED."""
    api.app.state.submit_limiter = RateLimiter(rate_per_s=1e6, burst=10**6)
    started: list[tuple[uvicorn.Server, asyncio.Task[None]]] = []

    async def start(**timeouts: float) -> str:
        config = server.uvicorn_config(
            api.app, "127.0.0.1", 0, lifespan="off", log_level="error", **timeouts
        )
        srv = uvicorn.Server(config)
        task = asyncio.create_task(srv.serve())
        while not srv.started:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.02)
        started.append((srv, task))
        port = srv.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    try:
        yield start
    finally:
        for srv, task in started:
            srv.should_exit = True
            await asyncio.wait_for(task, 15)


@pytest_asyncio.fixture
async def http(serve: Serve) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=await serve(), timeout=60) as c:
        yield c


def _raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _env(n: int) -> dict[str, str]:
    return {f"K{i}": "v" for i in range(n)}


OK = job_body()
# (id, raw body, the field the 422 names). Ids name the finding / rule each case checks.
HOSTILE_SUBMITS: list[tuple[str, bytes, str]] = [
    # finding 2: no NUL byte or unpaired surrogate in ANY string (Q1)
    ("Q1-nul-in-command", _raw(OK | {"command": "echo a\x00b"}), "command"),
    ("Q1-nul-in-name", _raw(OK | {"name": "a\x00"}), "name"),
    ("Q1-nul-in-env-value", _raw(OK | {"env": {"A": "x\x00"}}), "env.A"),
    ("Q1-nul-in-env-key", _raw(OK | {"env": {"A\x00": "x"}}), "env.A\\x00"),
    ("Q1-nul-in-tier", _raw(OK | {"tiers": ["rtx4090\x00"]}), "tiers[0]"),
    ("Q1-surrogate-in-command", b'{"command": "\\ud800", "num_gpus": 1}', "command"),
    (
        "Q1-surrogate-in-env-value",
        b'{"command": "x", "num_gpus": 1, "env": {"A": "\\udfff"}}',
        "env.A",
    ),
    ("Q1-surrogate-in-a-key", b'{"command": "x", "num_gpus": 1, "\\ud800": 1}', "\\ud800"),
    # finding 2: integers within the 32-bit columns, finite numbers (never dropped silently)
    ("Q1-time-limit-1e10", _raw(OK | {"time_limit_s": 1e10}), "time_limit_s"),
    ("Q1-time-limit-2^31", _raw(OK | {"time_limit_s": 2**31}), "time_limit_s"),
    (
        "Q1-time-limit-over-the-documented-max",
        _raw(OK | {"time_limit_s": limits.MAX_TIME_LIMIT_S + 1}),
        "time_limit_s",
    ),
    (
        "Q1-time-limit-Infinity",
        b'{"command": "x", "num_gpus": 1, "time_limit_s": Infinity}',
        "time_limit_s",
    ),
    (
        "Q1-time-limit-minus-Infinity",
        b'{"command": "x", "num_gpus": 1, "time_limit_s": -Infinity}',
        "time_limit_s",
    ),
    ("Q1-time-limit-NaN", b'{"command": "x", "num_gpus": 1, "time_limit_s": NaN}', "time_limit_s"),
    (
        "Q1-time-limit-1e400",
        b'{"command": "x", "num_gpus": 1, "time_limit_s": 1e400}',
        "time_limit_s",
    ),
    ("Q1-time-limit-zero", _raw(OK | {"time_limit_s": 0}), "time_limit_s"),
    ("Q1-min-vram-2^31", _raw(OK | {"min_vram_gb": 2**31}), "min_vram_gb"),
    ("Q1-min-vram-2^63", _raw(OK | {"min_vram_gb": 2**63}), "min_vram_gb"),
    ("Q1-min-vram-float", _raw(OK | {"min_vram_gb": 12.5}), "min_vram_gb"),
    # every bad num_gpus (Q1: an integer 1–8)
    ("Q1-num-gpus-0", _raw(OK | {"num_gpus": 0}), "num_gpus"),
    ("Q1-num-gpus--1", _raw(OK | {"num_gpus": -1}), "num_gpus"),
    ("Q1-num-gpus-1.5", _raw(OK | {"num_gpus": 1.5}), "num_gpus"),
    ("Q1-num-gpus-2.0", _raw(OK | {"num_gpus": 2.0}), "num_gpus"),
    ("Q1-num-gpus-string", _raw(OK | {"num_gpus": "2"}), "num_gpus"),
    ("Q1-num-gpus-true", _raw(OK | {"num_gpus": True}), "num_gpus"),
    ("Q1-num-gpus-null", _raw(OK | {"num_gpus": None}), "num_gpus"),
    ("Q1-num-gpus-9", _raw(OK | {"num_gpus": 9}), "num_gpus"),
    ("Q1-num-gpus-2^63", _raw(OK | {"num_gpus": 2**63}), "num_gpus"),
    ("Q1-num-gpus-2^64", _raw(OK | {"num_gpus": 2**64}), "num_gpus"),
    ("Q1-num-gpus-missing", _raw({"command": "x"}), "num_gpus"),
    # lengths and shapes (Q1)
    ("Q1-command-64KiB+1", _raw(OK | {"command": "x" * (64 * 1024 + 1)}), "command"),
    (
        "Q1-command-64KiB+1-in-utf8-bytes",
        _raw(OK | {"command": "é" * (32 * 1024) + "x"}),
        "command",
    ),
    ("Q1-command-empty", _raw(OK | {"command": ""}), "command"),
    ("Q1-command-blank", _raw(OK | {"command": " \n\t"}), "command"),
    ("Q1-name-129", _raw(OK | {"name": "n" * 129}), "name"),
    ("Q1-tiers-empty", _raw(OK | {"tiers": []}), "tiers"),
    ("Q1-tiers-unknown", _raw(OK | {"tiers": ["h100"]}), "tiers"),
    ("Q1-env-65-entries", _raw(OK | {"env": _env(65)}), "env"),
    ("Q1-env-value-over-32KiB", _raw(OK | {"env": {"A": "v" * (32 * 1024 + 1)}}), "env.A"),
    ("Q1-env-reserved", _raw(OK | {"env": {"SLURM_JOB_ID": "1"}}), "env.SLURM_JOB_ID"),
    ("Q1-unknown-field", _raw(OK | {"tier": "rtx4090"}), "tier"),
    # finding 3: malformed JSON at any depth, bad escapes, bad bytes → the §8 shape, never a 500
    ("A-json-nested-100k-deep", _deep(100_000), "body"),
    (
        "A-json-nested-100k-deep-in-a-field",
        b'{"command": "x", "num_gpus": 1, "env": ' + _deep(100_000) + b"}",
        "body",
    ),
    (
        "A-json-nested-past-the-limit",
        _raw(OK | {"env": {"A": json.loads(_deep(40))}}),
        "env.A" + "[0]" * 30,
    ),
    ("A-json-invalid-utf8", b'{"command": "\xff\xfe", "num_gpus": 1}', "body"),
    ("A-json-bad-escape", b'{"command": "\\x00", "num_gpus": 1}', "body"),
    ("A-json-truncated", b'{"command": "x", "num_gpus": ', "body"),
    (
        "A-json-integer-of-5000-digits",
        b'{"command": "x", "num_gpus": ' + b"9" * 5000 + b"}",
        "body",
    ),
    ("A-json-not-an-object", b"[1, 2]", "body"),
    ("A-json-empty-body", b"", "body"),
    ("A-body-over-512KiB", _raw(OK | {"command": "x" * (600 * 1024)}), "body"),
    ("A-env-100k-entries", _raw(OK | {"env": _env(100_000)}), "body"),
]


async def _submit_raw(http: httpx.AsyncClient, raw: bytes, **headers: str) -> httpx.Response:
    h = bearer("alice") | {"Content-Type": "application/json"} | headers
    return await http.post("/v1/jobs", content=raw, headers=h)


async def _nothing_appended(api: Api, before: int) -> None:
    """The refused requests appended nothing: a valid submit sent after them is the log's next
    event and every later one is its own (a positive signal, not a sleep: issue 27)."""
    assert await api.bus.last_seq() == before, "the refused request reached the log"
    r = await api.submit("alice", {"command": "true", "num_gpus": 1})
    assert r.status_code == 201, r.text
    sentinel = r.json()["id"]
    after = [d.event async for d in api.bus.replay(start_seq=before + 1)]
    assert after and isinstance(after[0], JobSubmitted), after
    assert {getattr(e, "job_id", None) for e in after} == {sentinel}, after
    assert set(await api.pool.fetchval("SELECT array_agg(job_id) FROM jobs") or []) <= {sentinel}


async def test_Q1_A_hostile_submit_table_is_422_naming_the_field_and_appends_nothing(
    api: Api, http: httpx.AsyncClient
) -> None:
    """One fixture for the whole table (each case is named in the failure report)."""
    before = await api.bus.last_seq()
    wrong = []
    for case, raw, field in HOSTILE_SUBMITS:
        r = await _submit_raw(http, raw)
        try:
            err = assert_error(r, 422, "VALIDATION_ERROR")
            assert err["details"]["field"] == field, err
            assert err["message"].startswith(field), err
        except AssertionError as e:
            wrong.append(f"{case}: {e}")
    assert not wrong, "\n".join(wrong)
    await _nothing_appended(api, before)


@pytest.mark.parametrize("size_mb", [10, 100])
async def test_A_10_to_100_MB_bodies_are_refused_without_being_held(
    api: Api, http: httpx.AsyncClient, size_mb: int
) -> None:
    before = await api.bus.last_seq()
    raw = b'{"command": "' + b"x" * (size_mb * 1024 * 1024) + b'", "num_gpus": 1}'
    err = assert_error(await _submit_raw(http, raw), 422, "VALIDATION_ERROR")
    assert err["details"]["field"] == "body"
    await _nothing_appended(api, before)


async def test_Q6_idempotency_key_must_be_storable(api: Api, http: httpx.AsyncClient) -> None:
    before = await api.bus.last_seq()
    for key in ("", "k" * (limits.MAX_IDEMPOTENCY_KEY + 1)):
        r = await _submit_raw(http, _raw(OK), **{"Idempotency-Key": key})
        assert assert_error(r, 422, "VALIDATION_ERROR")["details"]["field"] == "Idempotency-Key"
    await _nothing_appended(api, before)


# --- finding 3: NUL in path ids and query parameters, the maintenance message --------------

NUL_PARAMS = [
    ("GET", "/v1/jobs/a%00b", "job_id"),
    ("GET", "/v1/jobs/a%00b/events", "job_id"),
    ("GET", "/v1/jobs/a%00b/logs", "job_id"),
    ("POST", "/v1/jobs/a%00b/cancel", "job_id"),
    ("GET", "/v1/labs/B%00CG", "lab"),
    ("GET", "/v1/jobs?lab=%00", "lab"),
    ("GET", "/v1/jobs?state=RUNNING%00", "state"),
    ("GET", "/v1/jobs?user=bcg-alice%00", "user"),
    ("GET", "/v1/jobs?cursor=%00", "cursor"),
    ("GET", "/v1/me?%00=1", "\\x00"),
    ("GET", "/console/%00", "path"),  # not in the OpenAPI document: the path is named
]


async def test_A_nul_in_a_path_or_query_parameter_is_422_naming_it(
    api: Api, http: httpx.AsyncClient
) -> None:
    before = await api.bus.last_seq()
    wrong = []
    for method, url, field in NUL_PARAMS:
        r = await http.request(method, url, headers=bearer("admin"))
        try:
            err = assert_error(r, 422, "VALIDATION_ERROR")
            assert err["details"]["field"] == field, err
        except AssertionError as e:
            wrong.append(f"{method} {url}: {e}")
    assert not wrong, "\n".join(wrong)
    assert await api.bus.last_seq() == before


async def test_A_invalid_percent_escapes_in_a_path_are_a_plain_404(http: httpx.AsyncClient) -> None:
    for url in ("/v1/jobs/%ff%fe", "/v1/jobs/%ED%A0%80", "/v1/labs/%C0%80"):  # bad UTF-8
        assert_error(await http.get(url, headers=bearer("admin")), 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("raw", "status", "field"),
    [
        (_raw({"action": "start", "message": "NFS\x00swap"}), 422, "message"),
        (b'{"action": "start", "message": "NFS \\ud800"}', 422, "message"),
        (_raw({"action": "start", "message": "m" * 1001}), 422, "message"),
        (_deep(100_000), 400, None),
    ],
    ids=["nul", "lone-surrogate", "too-long", "nested-100k-deep"],
)
async def test_A_admin_maintenance_message_must_be_storable(
    api: Api, http: httpx.AsyncClient, raw: bytes, status: int, field: str | None
) -> None:
    before = await api.bus.last_seq()
    r = await http.post(
        "/v1/admin/maintenance",
        content=raw,
        headers=bearer("admin") | {"Content-Type": "application/json"},
    )
    err = assert_error(r, status, "VALIDATION_ERROR" if status == 422 else "BAD_REQUEST")
    if field is not None:
        assert err["details"]["field"] == field, err
    assert await api.bus.last_seq() == before


async def test_A_405_names_every_allowed_method(http: httpx.AsyncClient) -> None:
    r = await http.delete("/v1/jobs", headers=bearer("alice"))
    assert_error(r, 405, "METHOD_NOT_ALLOWED")
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST"}
    r = await http.put("/v1/jobs/x/cancel", headers=bearer("alice"))
    assert_error(r, 405, "METHOD_NOT_ALLOWED")
    assert r.headers["allow"] == "POST"


async def test_A_openapi_lists_what_each_route_really_answers(http: httpx.AsyncClient) -> None:
    doc = (await http.get("/openapi.json")).json()
    ops = doc["paths"]
    submit = ops["/v1/jobs"]["post"]
    assert {"200", "201", "401", "409", "422", "429", "503"} <= set(submit["responses"])
    body = submit["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["command"]["minLength"] == 1  # "" is refused, and says so
    assert body["properties"]["time_limit_s"]["maximum"] == limits.MAX_TIME_LIMIT_S
    assert body["properties"]["tiers"]["items"]["enum"] == ["rtx3080ti", "rtx4090"]
    assert body["additionalProperties"] is False
    assert {"401", "403", "404", "422", "503"} <= set(ops["/v1/jobs/{job_id}"]["get"]["responses"])
    assert "409" in ops["/v1/jobs/{job_id}/cancel"]["post"]["responses"]
    for path, operations in ops.items():
        for method, op in operations.items():
            schema = op["responses"]["422"]["content"]["application/json"]["schema"]
            assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (method, path)
            if path != "/healthz":
                assert "Retry-After" in op["responses"]["503"]["headers"], (method, path)
    assert "HTTPValidationError" not in doc["components"]["schemas"]  # never answered


# --- the other way round: what the API accepts, every store holds and the log replays -----

EDGE_VALID = [
    job_body(command="x" * (64 * 1024)),  # exactly 64 KiB
    job_body(command="echo 'héllo 🚀 日本'", name="n" * 128, env={"GREETING": "안녕 🚀"}),
    job_body(time_limit_s=limits.MAX_TIME_LIMIT_S, min_vram_gb=24, tiers=["rtx4090"]),
    job_body(time_limit_s=0.5, num_gpus=2),  # rounded up to 1 s
    job_body(env={**_env(63), "BIG": "v" * limits.MAX_ENV_VALUE_BYTES}),
    job_body(name=None, tiers=None, min_vram_gb=None, time_limit_s=None, env=None),
]


async def test_E6_replay_audits_a_log_the_API_accepted_edge_values_included(
    api: Api, http: httpx.AsyncClient, pg_dsn: str, nats_url: str
) -> None:
    for body in EDGE_VALID:
        r = await _submit_raw(http, _raw(body))
        assert r.status_code == 201, r.text
        job = (await http.get(f"/v1/jobs/{r.json()['id']}", headers=bearer("alice"))).json()
        assert job["command"] == body["command"]
    for _, raw, _ in HOSTILE_SUBMITS[:12]:  # refused ones leave no trace to trip the audit
        assert (await _submit_raw(http, raw)).status_code == 422
    assert await api.pool.fetchval("SELECT count(*) FROM jobs") == len(EDGE_VALID)
    limit = await api.pool.fetchval("SELECT max(time_limit_s) FROM jobs")
    assert limit == limits.MAX_TIME_LIMIT_S
    seq = await api.bus.last_seq()  # every read model has applied the whole log
    for name in ("jobs", "gpu_resources", "lab_usage"):
        await wait_applied(api.pool, name, seq, timeout=15)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "jpu.tools.replay", "--nats", nats_url, "--db", pg_dsn,
        "--stream", api.bus.stream, "--prefix", api.bus.prefix,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, out.decode() + err.decode()
    assert "no differences" in out.decode()


# --- finding 5: a client that does not send what it declared is cut off in time -------------


async def _read_until_closed(reader: asyncio.StreamReader, timeout: float) -> bytes:
    data = b""
    async with asyncio.timeout(timeout):
        while chunk := await reader.read(65536):
            data += chunk
    return data


@pytest.mark.parametrize(
    "sent",
    [
        b"POST /v1/jobs HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer demo-bcg-alice\r\nContent-Length: 1000\r\n\r\n"
        b'{"command"',  # declares 1,000 bytes, sends 10
        b"GET /healthz HTTP/1.1\r\nHost: gw\r\n",  # headers never finished
        b"",  # connects and says nothing
    ],
    ids=["body-1000-declared-10-sent", "partial-headers", "silent"],
)
async def test_finding5_a_slow_request_is_cut_within_the_read_timeout(
    api: Api, serve: Serve, sent: bytes
) -> None:
    header_s, body_s = 1.5, 2.0
    base = await serve(header_timeout_s=header_s, body_timeout_s=body_s)
    host, port = base.removeprefix("http://").split(":")
    before = await api.bus.last_seq()
    reader, writer = await asyncio.open_connection(host, int(port))
    t0 = time.monotonic()
    writer.write(sent)
    await writer.drain()
    async with httpx.AsyncClient(base_url=base) as other:  # others are served meanwhile
        assert (await other.get("/healthz")).status_code == 200
    answer = await _read_until_closed(reader, timeout=10)
    elapsed = time.monotonic() - t0
    writer.close()
    limit = body_s if b"\r\n\r\n" in sent else header_s
    assert limit - 0.2 <= elapsed <= limit + 2.0, elapsed
    assert answer.startswith(b"HTTP/1.1 408"), answer
    error = json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]
    assert error["code"] == "REQUEST_TIMEOUT" and error["message"]
    assert await api.bus.last_seq() == before


async def test_finding5_a_slow_but_steady_upload_within_the_timeout_is_served(
    api: Api, serve: Serve
) -> None:
    base = await serve(header_timeout_s=1.5, body_timeout_s=3.0)
    host, port = base.removeprefix("http://").split(":")
    body = _raw(job_body(num_gpus=0))  # refused by Q1: only the transport is under test
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        b"POST /v1/jobs HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {TOKENS['alice']}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    )
    for i in range(0, len(body), 8):  # 8 bytes every 0.1 s
        writer.write(body[i : i + 8])
        await writer.drain()
        await asyncio.sleep(0.1)
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    assert head.startswith(b"HTTP/1.1 422"), head


# --- admin inputs: jpu-admin refuses names no store (or NATS subject) can hold -------------


@pytest.mark.parametrize(
    "argv",
    [
        [b"lab", b"add", b"bad\xff"],  # not UTF-8: Python hands it over as a lone surrogate
        [b"lab", b"add", b"lab.with.dots"],  # a lab is a NATS subject token
        [b"user", b"add", b"bob\xfe", b"--lab", b"BCG"],
        [b"user", b"add", b"bob", b"--lab", b"B\xffCG"],
        [b"token", b"create", b"\xff"],
    ],
    ids=["lab-not-utf8", "lab-with-dots", "user-not-utf8", "user-lab-not-utf8", "token-not-utf8"],
)
async def test_admin_names_that_cannot_be_stored_are_refused_with_a_reason(
    pool: Any, pg_dsn: str, nats_url: str, bus: EventBus, argv: list[bytes]
) -> None:
    await bus.ensure_stream()
    await Identities(bus, None, 1.0).add_lab("BCG")  # SEC3: identities are events
    before = await bus.last_seq()
    env = {**os.environ, "JPU_STREAM_NAME": bus.stream, "JPU_SUBJECT_PREFIX": bus.prefix}
    proc = await asyncio.create_subprocess_exec(
        sys.executable.encode(), b"-P", b"-m", b"jpu.tools.admin",
        b"--database-url", pg_dsn.encode(), b"--nats-url", nats_url.encode(),
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, (out, err)
    assert err.startswith(b"jpu-admin: ") and err.count(b"\n") == 1, err  # no traceback
    assert b" name " in err, err  # the refusal says which name, not that a server is missing
    assert await bus.last_seq() == before  # nothing appended
