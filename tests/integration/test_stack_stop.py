"""`make run` stopped with Ctrl-C leaves no process behind (SPEC O2) — research jobs and LLM
backfill instances of the local backend included, although they outlive a service restart."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import httpx
import pytest

from jpu.bus import EventBus
from jpu.config import load_config
from jpu.stack import private
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.stack_process import StackProcess as Stack
from jpu.testing.stack_process import alive, descendants, remove_data_dir, world_searchable_tmpdir

WAIT_S = 60.0
T = TypeVar("T")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    d = world_searchable_tmpdir()
    yield d
    remove_data_dir(d)


def processes_under(*directories: Path) -> dict[int, str]:
    """pid → command line of every live process whose working directory is under one of
    `directories` (backfill instances run in theirs under the data dir, jobs in their output
    directories: as root outside it, SPEC SEC1)."""
    found = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            cwd = Path(os.readlink(f"/proc/{p}/cwd"))
            cmd = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if any(cwd.is_relative_to(d) for d in directories) and alive(int(p)):
            found[int(p)] = cmd
    return found


def wait_for(what: str, check: Callable[[], T], stack: Stack) -> T:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} within {WAIT_S} s\n{stack.log_tail()}")


async def test_O2_ctrl_c_stops_running_jobs_and_backfill(
    nats_url: str, pg_dsn: str, data_dir: Path
) -> None:
    stream, prefix = unique_names()
    stack = Stack(
        {
            "JPU_NATS_URL": nats_url,
            "JPU_DATABASE_URL": pg_dsn,
            "JPU_STREAM_NAME": stream,
            "JPU_SUBJECT_PREFIX": prefix,
            "JPU_BACKFILL_SETTLE_S": "1",  # B1: backfill on idle GPUs within seconds
            "JPU_CYCLE_S": "0.5",
        },
        data_dir,
    )
    started: set[int] = set()
    outputs = private.output_root(load_config(env=stack.env), stack.env)
    try:
        stack.wait_ready()
        headers = {"Authorization": f"Bearer {stack.token('bcg-alice')}"}
        with httpx.Client(base_url=stack.url, timeout=10, headers=headers) as http:
            r = http.post("/v1/jobs", json={"name": "long", "command": "sleep 600", "num_gpus": 1})
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]

            def running() -> bool:
                return http.get(f"/v1/jobs/{job_id}").json()["state"] == "RUNNING"

            def backfill() -> list[dict]:
                return list(http.get("/v1/backfill").json()["backfill"])

            wait_for("job RUNNING", running, stack)
            live = wait_for("backfill instances", backfill, stack)
            assert all(b["endpoint"] for b in live)  # the stub serves on its own port

        procs = wait_for(
            "job and backfill processes",
            lambda: (
                (p := processes_under(data_dir, outputs))
                and any("sleep 600" in c for c in p.values())
                and any("jpu.tools.backfill_stub" in c for c in p.values())
                and p
            ),
            stack,
        )
        started = descendants(stack.proc.pid) | set(procs)
    finally:
        assert stack.stop() == 0, stack.log_tail()
    deadline = time.monotonic() + 5
    while (left := {p for p in started if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: { {p: procs.get(p) for p in left} }"
    assert not processes_under(data_dir, outputs)
    [stop] = [e for e in stack.supervisor_log() if e["msg"] == "stopped local jobs and backfill"]
    assert f"local-{job_id}-1" in stop["stopped"]
    assert any(s.startswith("localbf-") for s in stop["stopped"])
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix)
    try:
        await bus.delete_stream()
    finally:
        await bus.close()
