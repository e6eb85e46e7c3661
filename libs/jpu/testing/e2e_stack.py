"""The running platform as real processes, driven through HTTP (tests/e2e).

`Stack` is one `python -m jpu.stack run` (all its services as child processes) on the session's
NATS JetStream and PostgreSQL, with its own stream, database, data dir and gateway port.
`Api` is one demo user's HTTP client (token `demo-<user>`). Jobs that must stay busy until the test
says so wait on a *gate*: a file the test creates in a world-readable directory
(`Stack.hold(name)` in the job's command, `Stack.release(name)` in the test).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import msgspec
import pytest
import yaml

from jpu.backends import joblogs
from jpu.bus import EventBus
from jpu.config import load_config
from jpu.domain import states
from jpu.stack import private
from jpu.testing.stack_process import StackProcess, remove_data_dir, world_searchable_tmpdir
from jpu.testing.unavailable import skip_unless_required

TERMINAL = states.in_order(states.TERMINAL)
ACTIVE = states.in_order(states.PENDING | states.PLACED)
T = TypeVar("T")

# SPEC R3's worked example on a running stack (scaled to seconds): test_e2e_demotion.py and the
# console's "why it waited" page (test_e2e_console_why.py) run it.
R3_STACK_ENV = {"JPU_CYCLE_S": "5"}  # the demotion must follow the charge at once (D8)
BCG_START, KDG_START = 240.0, 280.0
R3_STACK_CONFIG = {
    "nodes": [
        {"name": "gpu-4090x2-01", "gpus": {"rtx4090": 2}},
        {"name": "gpu-4090x1-01", "gpus": {"rtx4090": 1}},
    ],
    "labs": [{"name": "BCG", "usage": BCG_START}, {"name": "KDG", "usage": KDG_START}],
}


def chromium_or_skip() -> str:
    """The browser tests' documented skip: no Chromium on PATH (`scripts/install-browser`
    installs it). With JPU_TEST_BROWSER_REQUIRED=1 (CI) a missing browser is a failure."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is not None:
        return chromium
    skip_unless_required("browser", "no chromium on PATH (run scripts/install-browser)")


def wait_until(fn: Callable[[], T | None], timeout: float, what: Callable[[], str] | str) -> T:
    """Poll `fn` until it returns something truthy; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            said = what if isinstance(what, str) else what()
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {said}")
        time.sleep(0.05)


class Api:
    """One user's view of the REST API (SPEC §8)."""

    def __init__(self, url: str, user: str, token: str | None = None) -> None:
        self.user = user
        headers = {"Authorization": f"Bearer {token or f'demo-{user}'}"}
        self.http = httpx.Client(base_url=url, headers=headers, timeout=15.0)

    def close(self) -> None:
        self.http.close()

    def post_job(self, body: dict[str, Any], **headers: str) -> httpx.Response:
        return self.http.post("/v1/jobs", json=body, headers=headers)

    def submit(self, command: str, num_gpus: int = 1, **fields: Any) -> dict[str, Any]:
        """POST /v1/jobs; must be accepted (201). Returns the job body."""
        body = {"name": fields.pop("name", "e2e"), "command": command, "num_gpus": num_gpus}
        r = self.post_job({**body, **fields})
        assert r.status_code == 201, f"{self.user} submit: {r.status_code} {r.text}"
        return dict(r.json())

    def job(self, job_id: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/jobs/{job_id}")
        assert r.status_code == 200, f"GET job {job_id}: {r.status_code} {r.text}"
        return dict(r.json())

    def events(self, job_id: str) -> list[dict[str, Any]]:
        r = self.http.get(f"/v1/jobs/{job_id}/events")
        assert r.status_code == 200, f"GET events {job_id}: {r.status_code} {r.text}"
        return list(r.json()["events"])

    def cancel(self, job_id: str) -> httpx.Response:
        return self.http.post(f"/v1/jobs/{job_id}/cancel")

    def lab(self, lab: str) -> dict[str, Any]:
        r = self.http.get(f"/v1/labs/{lab}")
        assert r.status_code == 200, r.text
        return dict(r.json())

    def get(self, path: str, **params: Any) -> Any:
        r = self.http.get(path, params=params)
        assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text}"
        return r.json()

    def wait(
        self,
        job_id: str,
        done: Callable[[dict[str, Any]], bool] | Iterable[str],
        timeout: float = 20.0,
        what: str = "",
    ) -> dict[str, Any]:
        """Poll GET /v1/jobs/{id} until `done(job)` (or its state is one of `done`)."""
        if not callable(done):
            states = tuple(done)
            what = what or f"state in {states}"

            def done(j: dict[str, Any]) -> bool:
                return j["state"] in states

        last: dict[str, Any] = {}

        def check() -> dict[str, Any] | None:
            nonlocal last
            last = self.job(job_id)
            return last if done(last) else None

        return wait_until(
            check,
            timeout,
            lambda: (
                f"job {job_id} ({self.user}): {what}; last seen: {_brief(last)}; events: "
                f"{[e['type'] for e in self.events(job_id)]}"
            ),
        )


def _brief(job: dict[str, Any]) -> str:
    keys = ("state", "attempt", "pending_reason", "rank", "placement", "reservation", "reason")
    return json.dumps({k: job.get(k) for k in keys})


class Stack(StackProcess):
    """A running `python -m jpu.stack run` with its own data dir, optional config file, gates and
    one HTTP client per demo user."""

    def __init__(self, env: dict[str, str], config: dict[str, Any] | None = None) -> None:
        # the jobs (the users' accounts) wait on the gates: outside the data dir, which the
        # stack makes 0700 (SPEC SEC1)
        base = world_searchable_tmpdir("jpu-e2e-")
        data_dir = base / "data"
        data_dir.mkdir()
        self.gates = base / "gates"
        self.gates.mkdir()
        self.gates.chmod(0o755)
        env = dict(env)
        if config is not None:
            path = base / "config.yaml"
            path.write_text(yaml.safe_dump(config))
            env["JPU_CONFIG"] = str(path)
        super().__init__(env, data_dir)
        self._clients: dict[str, Api] = {}

    def api(self, user: str) -> Api:
        """The HTTP client of demo user `user` (token `demo-<user>`), cached."""
        if user not in self._clients:
            self._clients[user] = Api(self.url, user)
        return self._clients[user]

    # --- gates: jobs that run until the test releases them ----------------------------------

    def hold(self, name: str, then: str = "") -> str:
        """Shell text that waits until `release(name)`, then runs `then`."""
        return f"while [ ! -e {self.gates / name} ]; do sleep 0.05; done\n{then}\n"

    def release(self, *names: str) -> None:
        for name in names:
            (self.gates / name).touch()

    # --- what the processes wrote -------------------------------------------------------------

    def placement(self, node: str) -> dict[str, Any]:
        """GET /v1/placements, the one of `node` (the gpu_resources projection)."""
        pool = self.api("admin").get("/v1/placements")["placements"]
        return dict(next(p for p in pool if p["node"] == node))

    def output_dir(self, job_id: str, attempt: int = 1) -> Path:
        """JOB_OUTPUT_DIR of an attempt (SPEC X2) where the stack put it: as root, outside
        the data dir (SPEC SEC1, jpu.stack.private)."""
        root = private.output_root(load_config(env=self.env), self.env)
        return joblogs.attempt_dir(root, job_id, attempt)

    # --- cleanup ------------------------------------------------------------------------------

    def settle(self, timeout: float = 30.0) -> None:
        """Cancel every job still active (as the admin), open every gate, wait until none is."""
        for name in os.listdir(self.gates):
            (self.gates / name).touch()
        admin = self.api("admin")
        active = ",".join(ACTIVE)

        def left() -> list[dict[str, Any]]:
            return list(admin.get("/v1/jobs", state=active, limit=500)["jobs"])

        for job in left():
            r = admin.cancel(job["id"])
            assert r.status_code in (202, 409), r.text
        wait_until(lambda: not left(), timeout, lambda: f"jobs to end: {left()}")

    def stop(self) -> int:
        for client in self._clients.values():
            client.close()
        return super().stop()

    def remove(self) -> None:
        """The data dir, the gates, and what the stack kept outside (jpu.stack.private)."""
        remove_data_dir(self.data_dir)
        shutil.rmtree(self.data_dir.parent, ignore_errors=True)


def by_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == kind]


def one(events: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = by_type(events, kind)
    assert len(found) == 1, f"expected one {kind}, got {[e['type'] for e in events]}"
    return found[0]


async def lab_charges(stack: Stack, lab: str) -> list[dict[str, Any]]:
    """The lab's UsageCharged events read from the log itself (what an auditor replays, E6)."""
    prefix = stack.env["JPU_SUBJECT_PREFIX"]
    bus = await EventBus.connect(
        stack.env["JPU_NATS_URL"], stream=stack.env["JPU_STREAM_NAME"], prefix=prefix, name="e2e"
    )
    try:
        return [
            {"seq": d.seq, **msgspec.to_builtins(d.event)}
            async for d in bus.replay(filter_subject=f"{prefix}.lab.{lab}")
        ]
    finally:
        await bus.close()


def jpu_cli(stack: Stack, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The `jpu` command of this environment, as demo user `user`, against the stack."""
    jpu = Path(sys.executable).with_name("jpu")
    return subprocess.run(
        [str(jpu), *args, "--url", stack.url, "--token", f"demo-{user}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
