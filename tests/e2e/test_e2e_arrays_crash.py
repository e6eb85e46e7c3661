"""SIGKILL of intake during array submissions never leaves part of an array (SPEC Q7, E2, O5).

An array is one event: whatever the moment intake dies — before it appended the array's
`JobSubmitted`, or after it appended it and before it answered — the log holds the whole array
or nothing, and the jobs view shows every task or none. Each round posts a 300-task array with an
Idempotency-Key (Q6) and kills intake either the instant the array's event reaches NATS or a
random few milliseconds after the request left; the client retries with the same key until the
restarted intake answers. Then the log must hold exactly one submit per key, every array must
show all its tasks, and the log's invariants (jpu.testing.crash.check_log) must hold once every
task has ended (they are cancelled: cancelling a whole array is Q7 too).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from typing import Any

import httpx

from jpu.bus import Delivered, EventBus
from jpu.config import load_config
from jpu.events import JobSubmitted, decode
from jpu.testing.crash import check_log
from jpu.testing.e2e_stack import Stack, wait_until
from jpu.testing.stack_process import alive

STACK_ENV = {"JPU_MAX_ACTIVE_JOBS": "8"}
TASKS = 300
ROUNDS = 4


def intake_pid(stack: Stack) -> int | None:
    pids = stack.service_pids("intake")
    return pids[-1] if pids and alive(pids[-1]) else None


def intake_back(stack: Stack, pid: int, since: float) -> bool:
    """A new intake process (not `pid`) logged that it serves again after `since`."""
    new = intake_pid(stack)
    if new is None or new == pid:
        return False
    return any(
        str(e.get("msg", "")).startswith("intake ready") and e.get("ts", 0) >= since
        for e in stack.service_log("intake")
    )


async def submit_until_answered(
    http: httpx.AsyncClient, body: dict[str, Any], key: str
) -> httpx.Response:
    """Retry with the same Idempotency-Key until intake answers (Q6: never a second array)."""
    deadline = time.monotonic() + 90
    while True:
        with contextlib.suppress(httpx.HTTPError):
            r = await http.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
            if r.status_code in (200, 201):
                return r
        assert time.monotonic() < deadline, "intake never came back"
        await asyncio.sleep(0.2)


async def test_Q7_E2_intake_sigkilled_during_array_submit_never_leaves_part_of_an_array(
    stack: Stack,
) -> None:
    rng = random.Random(int(os.environ.get("JPU_CRASH_SEED", "7")))
    bus = await EventBus.connect(
        stack.env["JPU_NATS_URL"],
        stream=stack.env["JPU_STREAM_NAME"],
        prefix=stack.env["JPU_SUBJECT_PREFIX"],
        name="e2e-arrays-crash",
    )
    headers = {"Authorization": "Bearer demo-bcg-alice"}
    http = httpx.AsyncClient(base_url=stack.url, headers=headers, timeout=5.0)
    kill_on_submit: list[int] = []  # the intake pid to kill when an array's event lands

    async def on_event(msg: Any) -> None:
        with contextlib.suppress(Exception):
            if kill_on_submit and isinstance(decode(msg.data), JobSubmitted):
                os.kill(kill_on_submit.pop(), signal.SIGKILL)

    sub = await bus.nc.subscribe(f"{bus.prefix}.job.*", cb=on_event)
    answers: dict[str, str] = {}  # Idempotency-Key -> the array id it answered
    how: list[str] = []
    try:
        for n in range(ROUNDS):
            pid = intake_pid(stack)
            assert pid is not None
            key = f"sweep-{n}-{rng.random()}"
            since = time.time()
            body = {"command": "sleep 30", "num_gpus": 1, "array": f"0-{TASKS - 1}%1"}
            post = http.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
            if n % 2 == 0:  # appended, not answered yet
                kill_on_submit.append(pid)
                how.append("after the append")
                first = asyncio.create_task(post)
            else:  # a random moment of the submit: often before the append
                first = asyncio.create_task(post)
                await asyncio.sleep(rng.uniform(0.0, 0.02))
                os.kill(pid, signal.SIGKILL)
                how.append("random")
            with contextlib.suppress(httpx.HTTPError):
                await first
            await asyncio.to_thread(
                wait_until,
                lambda pid=pid, since=since: intake_back(stack, pid, since),
                60,
                "intake restarted",
            )
            r = await submit_until_answered(http, body, key)
            answers[key] = r.json()["id"]
    finally:
        await sub.unsubscribe()

    log: list[Delivered] = [d async for d in bus.replay()]
    submits = [d.event for d in log if isinstance(d.event, JobSubmitted)]
    by_key: dict[str | None, list[str]] = {}
    for e in submits:
        by_key.setdefault(e.idempotency_key, []).append(e.job_id)
    arrays = {e.job_id: e.array for e in submits}
    for key, array_id in answers.items():
        assert by_key[key] == [array_id], (key, by_key.get(key), how)  # one array per key
        recorded = arrays[array_id]
        assert recorded is not None and len(recorded.tasks) == TASKS
        shown = (await http.get(f"/v1/jobs/{array_id}")).json()
        assert len(shown["tasks"]) == TASKS, shown  # never part of an array

    for array_id in answers.values():  # end them all (Q7: one cancel per array)
        r = await http.post(f"/v1/jobs/{array_id}/cancel")
        assert r.status_code == 202, r.text

    async def ended() -> bool:
        for array_id in answers.values():
            states = (await http.get(f"/v1/jobs/{array_id}")).json()["states"]
            if set(states) - {"CANCELLED", "COMPLETED", "FAILED"}:
                return False
        return True

    deadline = time.monotonic() + 120
    while not await ended():
        assert time.monotonic() < deadline, "tasks did not end"
        await asyncio.sleep(0.5)
    log = [d async for d in bus.replay()]
    check = check_log(log, load_config(None))
    assert check.violations == [], check.violations[:10]
    await http.aclose()
    await bus.close()
    print(f"Q7 crash rounds: {how}; {len(answers)} arrays of {TASKS} tasks, all whole")
