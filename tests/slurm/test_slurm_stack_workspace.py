"""SPEC X4a end to end on the real Slurm test cluster with real podman: the whole stack with
`slurm_backend: slurm` and `isolation: container`. A lab member builds a workspace over REST (the
slurm-agent's workspace-builder builds it, with the network), makes it their default, submits a
job naming none; the job runs as a Slurm job inside the workspace's container (the nodes' helper)
as the user's mapped account without network, and its output is read back."""

from __future__ import annotations

import asyncio
import pwd
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from jpu.testing.api import bearer
from jpu.testing.slurm_fixtures import SlurmCluster
from jpu.testing.slurm_stack import slurm_stack

ALICE = bearer("alice")
SITE = {"JPU_ISOLATION": "container", "JPU_BACKFILL_ENABLED": "false",
        "JPU_WORKSPACE_PIP_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt"}  # fmt: skip
PROBE = (
    "python3 -c 'import six; print(\"six\", six.__version__)'\n"
    'echo "uid=$(id -u)"\n'
    '(exec 3<>"/dev/tcp/127.0.0.1/$GATEWAY_PORT") 2>/dev/null && echo net=on || echo net=off\n'
)


async def _until(c: httpx.AsyncClient, path: str, done: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        r = await c.get(path, headers=ALICE)
        assert r.status_code == 200, r.text
        if done(r.json()):
            return r.json()
        assert time.monotonic() < deadline, r.json()
        await asyncio.sleep(0.5)


async def test_X4a_a_lab_member_builds_a_workspace_and_runs_a_slurm_job_in_it(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, slurm_cluster: SlurmCluster,
    podman_helper: None,
) -> None:  # fmt: skip
    images: list[str] = []
    try:
        async with slurm_stack(nats_url, pool, pg_dsn, slurm_cluster, SITE) as s:
            c = s.client
            r = await c.post("/v1/workspaces", json={"name": "six", "requirements": "six\n"},
                             headers=ALICE)  # fmt: skip
            assert r.status_code == 202, r.text
            ws = await _until(c, "/v1/workspaces/six", lambda w: w["state"] != "BUILDING", 600)
            assert ws["state"] == "READY", ws
            images.append(ws["image"])
            put = await c.put("/v1/me/workspace", json={"workspace": "six"}, headers=ALICE)
            assert put.status_code == 200, put.text
            with socket.create_server(("0.0.0.0", 0)) as server:  # as the gateway's port
                port = server.getsockname()[1]
                socket.create_connection(("127.0.0.1", port), timeout=5).close()  # the control
                body = {"name": "in-six", "command": PROBE, "num_gpus": 1,
                        "env": {"GATEWAY_PORT": str(port)}}  # fmt: skip
                r = await c.post("/v1/jobs", json=body, headers=ALICE)  # names no workspace
                assert r.status_code == 201, r.text
                job = await _until(c, f"/v1/jobs/{r.json()['id']}", lambda j: j["terminal"], 120)
            out = Path(job["output_dir"])
            stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
            assert job["state"] == "COMPLETED", (stdout, stderr)
            assert job["workspace"] == "six" and job["isolation"] == "container:podman"
            assert "six 1." in stdout and "net=off" in stdout
            assert f"uid={pwd.getpwnam('jpu-bcg-alice').pw_uid}" in stdout
    finally:
        for image in images:
            subprocess.run(["podman", "rmi", "--ignore", "--force", image], capture_output=True)
