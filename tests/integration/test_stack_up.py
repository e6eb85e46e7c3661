"""`python -m jpu.stack run` (what `make run` calls) as a real process tree (SPEC O2, O5).

Each test starts the stack, waits for the ready banner, talks to the gateway, then sends SIGINT
and checks that every process the stack started is gone.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jpu.bus import EventBus
from jpu.stack import discover, private
from jpu.stack.supervisor import SERVICES
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.stack_process import (
    StackProcess,
    alive,
    descendants,
    remove_data_dir,
    world_searchable_tmpdir,
)

Stack = StackProcess


def processes_mentioning(text: str) -> set[int]:
    pids = set()
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if text in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace"):
                pids.add(int(p))
        except OSError:
            continue
    return pids - {os.getpid()}


@pytest.fixture
def data_dir() -> Iterator[Path]:
    d = world_searchable_tmpdir()
    yield d
    remove_data_dir(d)


def check_gateway(stack: Stack) -> None:
    with httpx.Client(base_url=stack.url, timeout=10) as http:
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").status_code == 200
        assert http.get("/v1/maintenance/status").json()["state"] == "NORMAL"
        token = stack.token("bcg-alice")
        assert token == "demo-bcg-alice"
        me = http.get("/v1/me", headers={"Authorization": f"Bearer {token}"})
        assert me.status_code == 200, me.text
        assert me.json()["user"] == "bcg-alice" and me.json()["lab"] == "BCG"


def stop_and_check_nothing_left(stack: Stack, started: set[int]) -> None:
    assert stack.stop() == 0, stack.log_tail()
    deadline = time.monotonic() + 5
    left = {p for p in started if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {p for p in left if alive(p)}
    assert not left, f"processes left behind: {left}"
    assert not processes_mentioning(str(stack.data_dir))


def connected(log: Path) -> int:
    return sum(json.loads(line)["msg"] == "connected" for line in log.read_text().splitlines())


async def test_O2_stack_up_answers_healthz(nats_url: str, pg_dsn: str, data_dir: Path) -> None:
    """Against the session's servers (faster): services, readiness, demo tokens, restarts."""
    stream, prefix = unique_names()
    stack = Stack(
        {
            "JPU_NATS_URL": nats_url,
            "JPU_DATABASE_URL": pg_dsn,
            "JPU_STREAM_NAME": stream,
            "JPU_SUBJECT_PREFIX": prefix,
        },
        data_dir,
    )
    started: set[int] = set()
    try:
        stack.wait_ready()
        started = descendants(stack.proc.pid)
        check_gateway(stack)
        assert len(started) >= len(SERVICES)  # the services, no embedded servers
        for name in SERVICES:
            assert (data_dir / "logs" / f"{name}.log").exists()

        # SPEC O5: a killed service is restarted by the supervisor.
        [intake] = stack.service_pids("intake")
        os.kill(intake, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while connected(data_dir / "logs" / "intake.log") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(stack.service_pids("intake")) == 2, stack.log_tail()
        assert connected(data_dir / "logs" / "intake.log") == 2
        started |= descendants(stack.proc.pid)
    finally:
        stop_and_check_nothing_left(stack, started)
    for name in ("intake", "gateway", "accounting", "notifier"):  # SIGTERM -> drain -> exit 0
        last = (data_dir / "logs" / f"{name}.log").read_text().splitlines()[-1]
        assert json.loads(last)["msg"] == "stopped", last
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix)
    try:
        for node in ("gpu-4090x2-01", "gpu-4090x2-02", "gpu-3080tix2-01", "gpu-3080tix2-02"):
            assert await bus.last_subject_seq(f"{prefix}.inventory.{node}") > 0  # SPEC §1.2
        await bus.delete_stream()
    finally:
        await bus.close()


def job_completes(stack: Stack) -> None:
    """A job submitted through the API runs to COMPLETED with its output where it belongs."""
    auth = {"Authorization": f"Bearer {stack.token('bcg-alice')}"}
    body = {"name": "hello", "command": "echo attempt=$JOB_ATTEMPT", "num_gpus": 1}
    job = httpx.post(f"{stack.url}/v1/jobs", json=body, headers=auth, timeout=10).json()
    deadline = time.monotonic() + 30
    while (state := job.get("state")) not in ("COMPLETED", "FAILED") and (
        time.monotonic() < deadline
    ):
        time.sleep(0.2)
        job = httpx.get(f"{stack.url}/v1/jobs/{job['id']}", headers=auth, timeout=10).json()
    assert state == "COMPLETED", job
    out = Path(job["output_dir"]) / "stdout"  # the platform's answer: outside the data dir
    assert out.read_text().strip() == "attempt=1"  # as root (SPEC SEC1)
    assert stack.data_dir not in out.parents or os.geteuid() != 0, out


def admin(stack: Stack, *argv: str) -> str:
    """`jpu-admin` with no server configured, run in the checkout (as after `make run`)."""
    unset = ("JPU_NATS_URL", "JPU_DATABASE_URL", "JPU_CONFIG")
    env = {k: v for k, v in stack.env.items() if k not in unset}
    run = subprocess.run(
        [sys.executable, "-m", "jpu.tools.admin", *argv], env=env, cwd=stack.data_dir.parent,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0 and run.stderr == "", run
    return run.stdout


def admin_finds_the_stack(stack: Stack) -> None:
    """It uses the running stack's own NATS and PostgreSQL (on the free ports it recorded in
    its data dir), never the built-in default URLs (SPEC O2)."""
    assert json.loads(admin(stack, "explain-usage", "BCG", "--json"))["lab"] == "BCG"
    users = json.loads(admin(stack, "user", "list", "--json"))
    assert "bcg-alice" in {u["name"] for u in users}


def nats_wants_an_identity(stack: Stack) -> None:
    """SPEC SEC2: the embedded NATS refuses an anonymous client; its passwords are private."""
    url = str(discover.running(stack.data_dir)["nats_url"])  # type: ignore[index]
    secrets = stack.data_dir / "secrets" / "nats.json"
    assert secrets.stat().st_mode & 0o077 == 0, oct(secrets.stat().st_mode)

    async def anonymous() -> None:
        import nats

        nc = await nats.connect(url, allow_reconnect=False, max_reconnect_attempts=0)
        await nc.close()

    with pytest.raises(Exception, match=r"(?i)authorization"):
        asyncio.run(anonymous())


def test_O2_stack_starts_its_own_nats_and_postgres(data_dir: Path) -> None:
    """No URLs given: embedded NATS + PostgreSQL under the data dir, reused on the next run."""
    env: dict[str, str | None] = {"JPU_NATS_URL": None, "JPU_DATABASE_URL": None}
    for run in (1, 2):
        stack = Stack(env, data_dir, relative=True)
        started: set[int] = set()
        try:
            stack.wait_ready()
            started = descendants(stack.proc.pid)
            assert any("(embedded)" in line for line in stack.lines)
            check_gateway(stack)
            if run == 1:
                job_completes(stack)
                admin_finds_the_stack(stack)
                nats_wants_an_identity(stack)
        finally:
            stop_and_check_nothing_left(stack, started)
        assert not (data_dir / discover.FILE).exists()  # forgotten when the stack stopped
        pg = private.outside(data_dir, "pg") if os.geteuid() == 0 else data_dir / "pg"  # SEC1
        assert (pg / "pgdata" / "PG_VERSION").exists(), run
        assert (data_dir / "nats").is_dir()
