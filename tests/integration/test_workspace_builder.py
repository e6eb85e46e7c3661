"""SPEC X4a end to end on real podman, NATS and PostgreSQL: a lab member builds a workspace
through REST, the slurm-agent's workspace-builder builds it (with the network, the site's index
configuration passed in), a job submitted into it imports what the build installed and its output
is read back; the same import fails in a job without the workspace. A builder killed mid-build
leaves the workspace FAILED ("the builder died") after the agent's restart, never READY."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest_asyncio

from jpu.backends import joblogs
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.backends.local.stop import terminate_all
from jpu.backends.workspaces import PipSite
from jpu.bus import EventBus
from jpu.config import Config, load_config
from jpu.domain.workspaces import workspace_id
from jpu.events import WorkspaceBuildFailed, WorkspaceBuildRequested, new_event_id
from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges
from jpu.testing.api import assert_error
from jpu.testing.inprocess import Worker, inprocess_stack, service_workers
from jpu.testing.local_world import root_dir
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.unavailable import needs_root
from jpu_services.backfill.service import BackfillOptions
from jpu_services.slurm_agent.builder import WorkspaceBuilder
from jpu_services.slurm_agent.options import AgentOptions

SITE = PipSite(ca_bundle="/etc/ssl/certs/ca-certificates.crt")  # the site's index configuration
NODE, TIER = "gpu-4090x2-01", "rtx4090"
IMPORT = "python3 -c 'import six; print(\"six\", six.__version__)'\n"
needs_root("rootful podman: the agent is root")


def _config(nats_url: str, pg_dsn: str, data_dir: Path) -> Config:
    stream, prefix = unique_names()
    return load_config(
        env={
            "JPU_NATS_URL": nats_url, "JPU_DATABASE_URL": pg_dsn, "JPU_STREAM_NAME": stream,
            "JPU_SUBJECT_PREFIX": prefix, "JPU_DATA_DIR": str(data_dir),
            "JPU_NODES": f"[{{name: {NODE}, gpus: {{{TIER}: 2}}}}]", "JPU_CYCLE_S": "1",
            "JPU_MIN_CYCLE_GAP_S": "0.05", "JPU_BACKFILL_ENABLED": "false",
            "JPU_SUBMIT_RATE_PER_S": "0", "JPU_ISOLATION": "container",
        }
    )  # fmt: skip


def _settings(config: Config, data_dir: Path) -> LocalSettings:
    return LocalSettings(
        data_dir=data_dir, nodes=list(config.nodes), timeout_grace_s=1.0, isolation="container",
        pip=SITE,
    )  # fmt: skip


def _remove_images(data_dir: Path) -> None:
    for wdir in (data_dir / "workspaces").glob("w*"):
        for box in ("jpu-wsbuild-" + wdir.name.lower() + f"-{b.name}" for b in wdir.iterdir()):
            subprocess.run(["podman", "rm", "--force", "--ignore", box], capture_output=True)
        ref = f"reference=localhost/jpu-ws-{wdir.name.lower()}-*"
        listed = subprocess.run(["podman", "images", "-q", "--filter", ref],
                                capture_output=True, text=True, check=False)  # fmt: skip
        for image in set(listed.stdout.split()):
            subprocess.run(["podman", "rmi", "--force", image], capture_output=True)


@pytest_asyncio.fixture
async def stack(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> AsyncIterator[tuple[httpx.AsyncClient, Path]]:
    assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    data_dir = root_dir("jpu-wsb-")
    config = _config(nats_url, pg_dsn, data_dir)
    options = AgentOptions(
        cancel_grace_s=2.0, poll_min_s=0.05, poll_max_s=0.3, inventory_every_s=5.0,
        output_root=joblogs.output_root(config),  # where the gateway serves it from (SEC1)
    )  # fmt: skip
    bf = BackfillOptions(enabled=False, command=config.backfill_command, settle_s=1.0)

    def workers(edges: Edges) -> dict[str, Worker]:
        agent = LocalBackend(_settings(config, data_dir))
        backfill = LocalBackend(LocalSettings(data_dir=data_dir, nodes=list(config.nodes)))
        return service_workers(edges, config, agent, backfill, options, bf)

    async def leftovers() -> None:
        await asyncio.to_thread(terminate_all, data_dir, 2.0)

    try:
        async with inprocess_stack(config, pool, workers, leftovers, http=True) as (c, _, _):
            yield c, data_dir
    finally:
        await asyncio.to_thread(_remove_images, data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _as(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer demo-{user}"}


async def _until(client: httpx.AsyncClient, path: str, user: str, done: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        r = await client.get(path, headers=_as(user))
        assert r.status_code == 200, r.text
        if done(r.json()):
            return r.json()
        assert time.monotonic() < deadline, r.json()
        await asyncio.sleep(0.5)


async def _run(client: httpx.AsyncClient, user: str, body: dict[str, Any]) -> tuple[dict, str]:
    r = await client.post("/v1/jobs", json={"num_gpus": 1, **body}, headers=_as(user))
    assert r.status_code == 201, r.text
    job = await _until(client, f"/v1/jobs/{r.json()['id']}", user, lambda j: j["terminal"], 120)
    out = Path(job["output_dir"])
    return job, (out / "stdout").read_text() + (out / "stderr").read_text()


async def _jpu(client: httpx.AsyncClient, cwd: Path, *args: str) -> tuple[int, str, str]:
    """The CLI as bcg-alice runs it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "jpu.cli.main", *args, cwd=cwd,
        env={**os.environ, "JPU_URL": str(client.base_url).rstrip("/"),
             "JPU_TOKEN": "demo-bcg-alice"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 600)
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_X4a_a_lab_member_builds_a_workspace_and_runs_a_job_in_it(
    stack: tuple[httpx.AsyncClient, Path],
) -> None:
    client, _ = stack
    project = root_dir("jpu-wsp-")  # the user's project folder, with its requirements.txt
    (project / "requirements.txt").write_text("six\n")
    name = f"six-{os.getpid()}"
    t0 = time.monotonic()
    rc, out, err = await _jpu(client, project, "workspace", "build", name, "-r",
                              "requirements.txt", "--wait")  # fmt: skip
    logs = await _jpu(client, project, "workspace", "logs", name)
    assert rc == 0 and "READY" in out, (out, err, logs)
    print(f"workspace build through the log: {time.monotonic() - t0:.1f} s")
    assert "Successfully installed six" in logs[1]
    ws = json.loads((await _jpu(client, project, "workspace", "show", name, "--json"))[1])
    assert ws["size"] > 0 and ws["created_at"] and ws["image"]
    assert name in (await _jpu(client, project, "workspace", "list"))[1]

    job, out = await _run(client, "bcg-alice", {"command": IMPORT, "workspace": name})
    assert job["state"] == "COMPLETED" and "six 1." in out, out
    assert job["workspace"] == name and job["isolation"] == "container:podman"
    job, out = await _run(client, "bcg-alice", {"command": IMPORT})  # the base image
    assert job["state"] == "FAILED" and "No module named 'six'" in out
    (project / "job.sh").write_text(f"#!/bin/sh\n#JPU --workspace {name}\n{IMPORT}")
    rc, out, err = await _jpu(client, project, "submit", "job.sh", "--json")
    assert rc == 0, err
    job = await _until(client, f"/v1/jobs/{json.loads(out)['id']}", "bcg-alice",
                       lambda j: j["terminal"], 120)  # fmt: skip
    assert job["state"] == "COMPLETED" and job["workspace"] == name
    shown = (await _jpu(client, project, "show", job["id"]))[1]
    assert f"Workspace: {name}" in shown and "Isolation: container:podman" in shown
    rc, out, err = await _jpu(client, project, "workspace", "rm", name)
    assert rc == 0 and "deleted" in out
    rc, _, err = await _jpu(client, project, "submit", "job.sh")
    assert rc != 0 and "workspace" in err  # 422 naming `workspace`
    shutil.rmtree(project, ignore_errors=True)


CONTAINERFILE = """# a workspace from a Containerfile: one stage on the platform's base image
FROM localhost/jpu-base:bookworm
ENV GREETING=from-the-containerfile
RUN python3 -m venv /opt/venv \\
 && /opt/venv/bin/pip install --no-cache-dir six
"""


async def test_X4a_a_workspace_is_built_from_a_Containerfile_on_the_base_image(
    stack: tuple[httpx.AsyncClient, Path],
) -> None:
    client, _ = stack
    project = root_dir("jpu-wsc-")
    name = f"cf-{os.getpid()}"
    # FROM another image: a 422 naming `containerfile`, and nothing is appended
    other = CONTAINERFILE.replace("localhost/jpu-base:bookworm", "docker.io/library/debian")
    r = await client.post("/v1/workspaces", json={"name": name, "containerfile": other},
                          headers=_as("bcg-alice"))  # fmt: skip
    error = assert_error(r, 422, "VALIDATION_ERROR")
    assert error["details"]["field"] == "containerfile"
    assert "only the platform's base image" in error["message"]
    assert (await client.get(f"/v1/workspaces/{name}", headers=_as("bcg-alice"))).status_code == 404
    (project / "Containerfile").write_text(CONTAINERFILE)
    rc, out, err = await _jpu(client, project, "workspace", "build", name, "-f", "Containerfile",
                              "--wait")  # fmt: skip
    logs = (await _jpu(client, project, "workspace", "logs", name))[1]
    assert rc == 0 and "READY" in out, (out, err, logs)
    assert "Successfully installed six" in logs  # the build reached the package index
    ws = json.loads((await _jpu(client, project, "workspace", "show", name, "--json"))[1])
    assert ws["source_kind"] == "containerfile" and ws["size"] > 0
    probe = IMPORT + 'echo "greeting=$GREETING"\n'
    job, out = await _run(client, "bcg-alice", {"command": probe, "workspace": name})
    assert job["state"] == "COMPLETED" and "six 1." in out, out
    assert "greeting=from-the-containerfile" in out  # the image's own ENV reaches the job
    assert job["isolation"] == "container:podman"
    shutil.rmtree(project, ignore_errors=True)


async def test_X4a_a_builder_killed_mid_build_ends_FAILED_never_READY(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    data_dir = root_dir("jpu-wsk-")
    config = _config(nats_url, pg_dsn, data_dir)
    bus = await EventBus.connect(nats_url, stream=config.stream_name, prefix=config.subject_prefix)
    backend = LocalBackend(_settings(config, data_dir))
    wid = workspace_id("user", "BCG", "bcg-alice", "killed")
    try:
        await bus.ensure_stream()
        await bus.append(
            WorkspaceBuildRequested(
                event_id=new_event_id(), ts=time.time(), workspace_id=wid, build=1,
                user="bcg-alice", lab="BCG", name="killed", scope="user",
                source_kind="requirements", source="six\n",
            )
        )  # fmt: skip
        stop = asyncio.Event()
        first = WorkspaceBuilder(bus, backend.workspaces, SystemClock(), config.subject_prefix)
        task = asyncio.create_task(first.run(stop, "wsb-test"))
        deadline = time.monotonic() + 60
        while (local := backend.workspaces.get(wid, "b1")) is None or not _builder_pid(
            backend, wid
        ):
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.1)
        assert local.state == "BUILDING"
        stop.set()  # the agent dies, and its build with it
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        os.killpg(_builder_pid(backend, wid), signal.SIGKILL)
        # the agent's restart: a new builder reads the log and the scratch
        stop = asyncio.Event()
        second = WorkspaceBuilder(bus, backend.workspaces, SystemClock(), config.subject_prefix)
        task = asyncio.create_task(second.run(stop, "wsb-test"))
        deadline = time.monotonic() + 60
        while True:
            events = [
                d.event
                async for d in bus.replay(filter_subject=f"{config.subject_prefix}.workspace.>")
            ]
            outcomes = events[1:]
            if outcomes:
                break
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.wait_for(task, 30)
        assert len(outcomes) == 1 and isinstance(outcomes[0], WorkspaceBuildFailed)
        assert "builder died" in outcomes[0].reason
        image = backend.workspaces.image_of(wid, "b1")
        assert subprocess.run(["podman", "image", "exists", image]).returncode != 0
    finally:
        await backend.close()
        await bus.delete_stream()
        await bus.close()
        await asyncio.to_thread(_remove_images, data_dir)
        shutil.rmtree(data_dir, ignore_errors=True)


def _builder_pid(backend: LocalBackend, wid: str) -> int:
    try:
        raw = json.loads((backend.workspaces.dir(wid, "b1") / "state.json").read_text())
    except FileNotFoundError:
        return 0
    return int((raw.get("builder") or [0])[0])


async def test_X4a_a_build_the_builder_cannot_run_ends_FAILED_with_why(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """Its scratch directory cannot be made (here: a file where the directory should be): the
    workspace ends FAILED saying so, never BUILDING for ever."""
    data_dir = root_dir("jpu-wsf-")
    config = _config(nats_url, pg_dsn, data_dir)
    bus = await EventBus.connect(nats_url, stream=config.stream_name, prefix=config.subject_prefix)
    backend = LocalBackend(_settings(config, data_dir))
    (data_dir / "workspaces").write_text("not a directory\n")
    wid = workspace_id("user", "BCG", "bcg-alice", "nowhere")
    stop = asyncio.Event()
    try:
        await bus.ensure_stream()
        await bus.append(
            WorkspaceBuildRequested(
                event_id=new_event_id(), ts=time.time(), workspace_id=wid, build=1,
                user="bcg-alice", lab="BCG", name="nowhere", scope="user",
                source_kind="requirements", source="six\n",
            )
        )  # fmt: skip
        builder = WorkspaceBuilder(bus, backend.workspaces, SystemClock(), config.subject_prefix)
        task = asyncio.create_task(builder.run(stop, "wsb-fail"))
        subject = f"{config.subject_prefix}.workspace.>"
        deadline = time.monotonic() + 30
        while len(events := [d.event async for d in bus.replay(filter_subject=subject)]) < 2:
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.1)
        stop.set()
        await asyncio.wait_for(task, 30)
        assert isinstance(events[1], WorkspaceBuildFailed)
        assert "could not run the build" in events[1].reason
    finally:
        stop.set()
        await backend.close()
        await bus.delete_stream()
        await bus.close()
        shutil.rmtree(data_dir, ignore_errors=True)
