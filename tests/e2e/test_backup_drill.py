"""The restore drill (docs/operations.md "Backup and restore"), on the running platform.

A stack on its own NATS JetStream and PostgreSQL runs jobs: two finished (one completed, one
failed), two running (held on gates, the cluster full) and two queued behind them. While it
runs, `python -m jpu.tools.admin backup FILE`. Then the disaster: every process of the platform is
SIGKILLed (the jobs, in their own sessions, run on as on a compute node), both servers stop
and every volume goes (the JetStream store and the PostgreSQL data dir); empty servers
start on the same addresses, `python -m jpu.tools.admin restore FILE` writes the log back and
rebuilds the projections, the stack starts again. The API answers as before: the same jobs in
the same states, the same events, the same usage (TFLOP-s), the same explanations of each wait
and of each lab's usage (U4, F5), and `python -m jpu.tools.replay` finds no difference (E6).
Then the platform goes on from there: the gates open, the running jobs end, the queued run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jpu.embedded.base import free_port
from jpu.testing.crash import KillableNats, KillablePostgres
from jpu.testing.e2e_stack import Api, Stack, wait_until
from jpu.testing.stack_process import StackProcess, alive, world_searchable_tmpdir

pytestmark = pytest.mark.timeout(420)

CONFIG = {
    "nodes": [
        {"name": "gpu-4090x2-01", "gpus": {"rtx4090": 2}},
        {"name": "gpu-4090x1-01", "gpus": {"rtx4090": 1}},
    ],
    "labs": [{"name": "BCG", "usage": 240.0}, {"name": "KDG", "usage": 280.0}],
}
# What the API values at the moment it is asked (decay to now, time running or waiting so far,
# the moment itself, when the dispatcher last decided or estimated, how far the log reached
# then — the restarted services append their own start-up events): it moves between two reads
# of the same jobs' log, so it is not compared. Everything else is.
AT_ASKING = re.compile(
    r"^\.(job \w+\.(elapsed_s|decided_at|estimated_at)|lab \w+\.(accrued_uncharged|usage)"
    r"|wait \w+\.(as_of|seq|phases\.\w+)"
    r"|usage \w+\.(at|listed_value|total_value|usage|charges\[\d+\]\.(decay|value_now)))$"
)


class Servers:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.nats = KillableNats(root / "nats", port=free_port())
        self.pg = KillablePostgres(root / "pg", port=free_port())

    def start(self) -> None:
        self.nats.start()
        self.pg.start()

    def stop(self) -> None:
        self.pg.stop()
        self.nats.stop()

    def destroy_volumes(self) -> None:
        """Stopped, then every byte they stored removed (the volumes lost)."""
        self.stop()
        shutil.rmtree(self.nats.data_dir)
        shutil.rmtree(self.root / "pg")
        assert not (self.root / "pg").exists() and not self.nats.data_dir.exists()


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    root = world_searchable_tmpdir("jpu-drill-")
    s = Servers(root)
    s.start()
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def stack(servers: Servers) -> Iterator[Stack]:
    """Overrides tests/e2e/conftest.py's: on the drill's own servers, stopped by the test."""
    env = {
        "JPU_CYCLE_S": "0.5",  # as tests/e2e/conftest.py's stacks
        "JPU_SUBMIT_RATE_PER_S": "0",
        "JPU_ESTIMATE_EVERY_S": "1",
        "JPU_NATS_URL": servers.nats.url,
        "JPU_DATABASE_URL": servers.pg.dsn(),
    }
    s = Stack(env, CONFIG)
    try:
        s.wait_ready()
        yield s
    finally:
        s.stop()
        s.remove()


@pytest.fixture(autouse=True)
def settled() -> None:
    """Overrides conftest's: the drill ends its jobs itself."""


def admin_tool(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    run = subprocess.run(
        [sys.executable, "-m", "jpu.tools.admin", *args],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, f"jpu-admin {args[0]}: {run.returncode}\n{run.stdout}{run.stderr}"
    return run


def replay(env: dict[str, str]) -> str:
    run = subprocess.run(
        [sys.executable, "-m", "jpu.tools.replay", "--nats", env["JPU_NATS_URL"],
         "--db", env["JPU_DATABASE_URL"]],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, f"replay: {run.returncode}\n{run.stdout}{run.stderr}"
    assert "no differences" in run.stdout, run.stdout
    return run.stdout


def view(url: str, jobs: dict[str, str]) -> dict[str, Any]:
    """What the API says of the jobs (each as its owner), the labs and the explanations."""
    out: dict[str, Any] = {}
    clients: dict[str, Api] = {}
    try:
        for user in {*jobs.values(), "admin"}:
            clients[user] = Api(url, user)
        for job_id, user in sorted(jobs.items()):
            api = clients[user]
            out[f"job {job_id}"] = api.job(job_id)
            out[f"events {job_id}"] = api.events(job_id)
            out[f"wait {job_id}"] = api.get(f"/v1/jobs/{job_id}/wait")
        admin = clients["admin"]
        for lab in ("BCG", "KDG"):
            out[f"lab {lab}"] = admin.lab(lab)
            out[f"usage {lab}"] = admin.get(f"/v1/labs/{lab}/usage/explain")
        return out
    finally:
        for c in clients.values():
            c.close()


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where `b` differs from `a`: one line per differing leaf (path, both values)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted({*a, *b}) for d in differences(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in differences(x, y, f"{path}[{i}]")
        ]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What the log says differently (not what is valued at the moment of asking)."""
    return [d for d in differences(before, after) if not AT_ASKING.match(d.split(": ")[0])]


def test_E2_E3_E6_O5_backup_lose_every_volume_restore_and_the_api_answers_as_before(
    stack: Stack, servers: Servers
) -> None:
    alice, carol = stack.api("bcg-alice"), stack.api("kdg-carol")
    jobs: dict[str, str] = {}

    def submit(api: Api, command: str, gpus: int) -> str:
        job_id = str(api.submit(command, num_gpus=gpus)["id"])
        jobs[job_id] = api.user
        return job_id

    done_ok = submit(alice, "sleep 0.3", 1)
    done_fail = submit(carol, "sleep 0.2; exit 3", 1)
    alice.wait(done_ok, ["COMPLETED"], 60)
    carol.wait(done_fail, ["FAILED"], 60)
    running = [
        submit(alice, stack.hold("a"), 2),
        submit(carol, stack.hold("c"), 1),
    ]
    for job_id in running:
        stack.api(jobs[job_id]).wait(job_id, ["RUNNING"], 60)
    queued = [submit(alice, "true", 1), submit(carol, "true", 2)]
    for job_id in queued:  # waiting for the GPUs, and the dispatcher's estimate says why
        stack.api(jobs[job_id]).wait(
            job_id, lambda j: j["pending_reason"] == "Resources" and j["estimate_basis"], 30
        )

    env = stack.env
    before = view(stack.url, jobs)
    assert [before[f"job {j}"]["state"] for j in (done_ok, done_fail, *running, *queued)] == [
        "COMPLETED", "FAILED", "RUNNING", "RUNNING", "GLOBAL_QUEUE_WAIT", "GLOBAL_QUEUE_WAIT",
    ]  # fmt: skip
    assert before["lab BCG"]["raw_value"] > 240.0  # charged
    replay(env)

    file = servers.root / "drill.jpubak"
    admin_tool(env, "backup", str(file))
    assert file.stat().st_size > 0

    # the disaster: every process of the platform dies at once (SIGKILL: nothing appended on the
    # way down) and both servers lose their volumes; the jobs run on, as on a compute node
    services = [e["pid"] for e in stack.supervisor_log() if e["msg"] == "service started"]
    assert len(services) >= 7, services
    os.killpg(stack.proc.pid, signal.SIGKILL)  # the supervisor first: it restarts no one now
    for pid in services:  # each service leads its own process group (jpu.stack.supervisor)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    stack.proc.wait(30)
    wait_until(lambda: not any(alive(p) for p in services), 30, "every service to be gone")
    servers.destroy_volumes()
    servers.start()

    out = admin_tool(env, "restore", str(file)).stdout
    assert "checksum ok" in out and "restored" in out, out
    again = StackProcess(env, stack.data_dir)  # the compute side (jobs, their state) kept
    try:
        again.wait_ready()
        wait_until(
            lambda: not changed(before, view(again.url, jobs)),
            60,
            lambda: (
                "the API as before the disaster:\n"
                + "\n".join(changed(before, view(again.url, jobs)))
            ),
        )
        after = view(again.url, jobs)
        assert not changed(before, after)
        for lab in ("BCG", "KDG"):  # the usage to the unit: the log's chain itself, exactly
            assert after[f"lab {lab}"]["raw_value"] == before[f"lab {lab}"]["raw_value"]
        replay(env)

        # and it goes on: the held jobs end, the queued ones run
        stack.release("a", "c")
        for job_id in (*running, *queued):
            Api(again.url, jobs[job_id]).wait(job_id, ["COMPLETED"], 90)
    finally:
        assert again.stop() == 0
