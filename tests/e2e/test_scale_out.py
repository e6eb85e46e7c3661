"""Scale-out on the running platform (SPEC E4, E5, E2, E3, Q6, F5): several copies of the
services that may run as copies, all at once, on one log — as docs/operations.md states them.

Beside the stack's own processes (two gateways sharing a port, the first of them projecting;
one intake, one accounting) this module runs, as separate processes on the same NATS stream and
PostgreSQL database:
  * a second intake (same queue group: NATS hands each command to one of the two at random);
  * a second gateway on its own port *with its projector on*: two projection writers;
  * a second accounting: two charge writers, and two writers of lab_usage/usage_ledger.
The claims tested:
  (a) one Idempotency-Key submitted concurrently through both gateways, many times → exactly one
      JobSubmitted in the log and both replies name that job (Q6, E2);
  (b) the API's promise, read-your-writes across gateways: once a command's reply has come back,
      a read through the *other* gateway shows its effect at once (no polling), and once the
      projections are at the log's end both gateways give the same body;
  (c) (the dispatcher's standby: test_e2e_failover.py; its time: bench/bench_failover.py);
  (d) with two accounting and two projection writers, every charge is appended once and the
      projections equal a rebuild from the log (`python -m jpu.tools.replay`, E3, E6, F5).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import asyncpg
import httpx
import pytest

from jpu.bus import Delivered, EventBus
from jpu.config import load_config
from jpu.embedded.base import free_port
from jpu.events import JobSubmitted, UsageCharged
from jpu.testing.crash import check_log
from jpu.testing.crash_harness import PROJECTIONS, run_replay
from jpu.testing.e2e_stack import TERMINAL, Api, Stack, wait_until

pytestmark = pytest.mark.timeout(300)

USERS = ("bcg-alice", "kdg-carol", "osl-erin")
RACES = 30  # keys, each submitted twice at once; the two land on different intakes at random


@dataclass
class Copies:
    gateway_b: str  # the second gateway's URL (its own projector)
    procs: dict[str, subprocess.Popen[bytes]]


def _start(stack: Stack, name: str, module: str, **env: str) -> subprocess.Popen[bytes]:
    with open(stack.data_dir / "logs" / f"{name}.log", "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-P", "-m", f"jpu_services.{module}"],
            env={**stack.env, "PYTHONUNBUFFERED": "1", **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )


def _logged(stack: Stack, name: str, prefix: str) -> bool:
    return any(str(e["msg"]).startswith(prefix) for e in stack.service_log(name))


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture(scope="module")
def copies(stack: Stack) -> Iterator[Copies]:
    port = free_port()
    procs = {
        "intake-2": _start(stack, "intake-2", "intake"),
        "accounting-2": _start(stack, "accounting-2", "accounting"),
        "gateway-b": _start(
            stack, "gateway-b", "gateway", JPU_GATEWAY_PORT=str(port), JPU_GATEWAY_PROJECTOR="1"
        ),
    }
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _logged(stack, "intake-2", "intake ready"), 60, "intake-2 ready")
        wait_until(
            lambda: _logged(stack, "accounting-2", "accounting ready"), 60, "accounting-2 ready"
        )
        wait_until(lambda: _ready(url), 60, "gateway-b /readyz")
        yield Copies(url, procs)
        # Every copy ran to the end: none crashed on what its twin did.
        for name, p in procs.items():
            assert p.poll() is None, f"{name} exited {p.returncode}"
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p in procs.items():
            try:
                rc = p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                rc = p.wait()
            assert rc == 0, f"{name} stopped with exit {rc}"


async def _log(stack: Stack) -> list[Delivered]:
    env = stack.env
    bus = await EventBus.connect(
        env["JPU_NATS_URL"], stream=env["JPU_STREAM_NAME"], prefix=env["JPU_SUBJECT_PREFIX"]
    )
    try:
        return [d async for d in bus.replay()]
    finally:
        await bus.close()


async def test_Q6_one_idempotency_key_raced_through_two_intakes_makes_one_job(
    stack: Stack, copies: Copies
) -> None:
    headers = {"Authorization": "Bearer demo-bcg-alice"}
    body = {"name": "race", "command": "true", "num_gpus": 1}
    async with (
        httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=30) as a,
        httpx.AsyncClient(base_url=copies.gateway_b, headers=headers, timeout=30) as b,
    ):

        async def race(k: int) -> tuple[httpx.Response, httpx.Response]:
            key = {"Idempotency-Key": f"scale-race-{k}"}
            ra, rb = await asyncio.gather(
                a.post("/v1/jobs", json=body, headers=key),
                b.post("/v1/jobs", json=body, headers=key),
            )
            return ra, rb

        pairs = []
        for first in range(0, RACES, 5):  # five races at a time: 10 submits in flight
            pairs += await asyncio.gather(*(race(k) for k in range(first, first + 5)))

    ids = []
    for ra, rb in pairs:
        assert {ra.status_code, rb.status_code} <= {200, 201}, (ra.text, rb.text)
        # One of the two created the job (201), the other answered it as a replay (200).
        assert sorted((ra.status_code, rb.status_code)) == [200, 201], (ra.text, rb.text)
        assert ra.json()["id"] == rb.json()["id"], (ra.json(), rb.json())
        ids.append(ra.json()["id"])
    assert len(set(ids)) == RACES

    submitted = Counter(
        d.event.job_id
        for d in await _log(stack)
        if isinstance(d.event, JobSubmitted) and d.event.job_id in set(ids)
    )
    assert submitted == Counter(set(ids)), {j: n for j, n in submitted.items() if n != 1}
    # Both intakes were answering (the stack's, and intake-2 is subscribed in its queue group).
    assert copies.procs["intake-2"].poll() is None


async def test_E4_read_your_writes_across_two_gateways(stack: Stack, copies: Copies) -> None:
    a, b = stack.api("kdg-carol"), Api(copies.gateway_b, "kdg-carol")
    try:
        # A write through A; its reply came after the projection applied it, and both gateways
        # read the same tables: the very next read through B shows it (no polling).
        job = a.submit(stack.hold("ryw"), name="ryw")
        assert "projection_lag" not in job, job  # the promise is for an unmarked reply
        seen = b.job(job["id"])
        assert (seen["id"], seen["name"], seen["user"]) == (job["id"], "ryw", "kdg-carol")
        assert seen["state"] not in TERMINAL
        b.wait(job["id"], ["RUNNING"], timeout=30)
        # A write through B, read through A at once: the cancel is visible.
        r = b.cancel(job["id"])
        assert r.status_code == 202 and "projection_lag" not in r.json(), r.text
        now = a.job(job["id"])
        assert now["state"] in ("CANCELLING", "CANCELLED"), now
        done = a.wait(job["id"], TERMINAL, timeout=30)
        assert done["state"] == "CANCELLED", done
        # Once the projections are at the log's end, both gateways give the same answer.
        wait_until(
            lambda: a.job(job["id"]) == b.job(job["id"]),
            10,
            lambda: f"same body: A {a.job(job['id'])} B {b.job(job['id'])}",
        )
        assert a.events(job["id"]) == b.events(job["id"])
    finally:
        b.close()


async def test_F5_E3_two_accounting_and_two_projection_writers_never_double_apply(
    stack: Stack, copies: Copies
) -> None:
    apis = [stack.api(u) for u in USERS] + [Api(copies.gateway_b, u) for u in USERS]
    try:
        ids = [
            api.submit(f"sleep 0.{i % 5}; exit {3 if i % 4 == 3 else 0}", name=f"w{i}")["id"]
            for i, api in enumerate(apis * 2)
        ]
        for i, job_id in enumerate(ids):
            apis[i % len(apis)].wait(job_id, TERMINAL, timeout=90)
    finally:
        for api in apis[len(USERS) :]:
            api.close()

    config = load_config(env=stack.env)
    # Until every charge the log owes is appended (by either accounting).
    log = await _log(stack)
    for _ in range(200):
        check = check_log(log, config)
        if set(check.owed) <= set(check.charged):
            break
        await asyncio.sleep(0.1)
        log = await _log(stack)
    check = check_log(log, config)
    assert not check.violations, check.violations[:20]
    assert set(check.owed) <= set(check.charged), set(check.owed) - set(check.charged)
    twice = {cid: len(evs) for cid, evs in check.charged.items() if len(evs) != 1}
    assert not twice, twice
    ended = [d for d in log if isinstance(d.event, UsageCharged) and d.event.job_id in ids]
    assert {d.event.job_id for d in ended} == set(ids)  # every job charged, each once (above)

    # The projections (two gateways projecting, two accountings keeping lab usage) equal a
    # rebuild from sequence 1 (E3, E6): jpu.tools.replay rebuilds and diffs, exit 0 = no difference.
    # It compares each projection at the position it applied: wait until all are at the log's end.
    last = log[-1].seq
    conn = await asyncpg.connect(config.database_url)
    try:

        async def at_end() -> bool:
            rows = await conn.fetch("SELECT projection, last_seq FROM projection_positions")
            pos = {r["projection"]: int(r["last_seq"]) for r in rows}
            return all(pos.get(p, 0) >= last for p in PROJECTIONS)

        for _ in range(300):
            if await at_end():
                break
            await asyncio.sleep(0.1)
        assert await at_end(), "projections did not reach the log's end within 30 s"
    finally:
        await conn.close()
    rc, out = await run_replay(stack, config)
    assert rc == 0, out
