"""The operator's deployment, started for real (SPEC O3): `scripts/cluster up` (what `make cluster`
runs) builds the images with no registry and brings compose/docker-compose.yml up on podman — a
3-node NATS cluster, PostgreSQL, two gateways behind one front address and every service with its
copies. A job submitted over REST through the front runs, completes and is charged; `down -v`
stops every container cleanly (exit 0) and leaves nothing behind. Needs podman
(scripts/install-podman): without it this fails, never skips.

Its own compose project and port, so a `make cluster` of the developer's is left alone. Images are
cached by content tag: a second run builds nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from jpu.domain import states
from jpu.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "scripts" / "cluster"
TERMINAL = set(states.TERMINAL)
# Every replicated stream the platform creates: the log, its DLQ, and the KV / object buckets.
STREAMS_PY = """
import asyncio, json, nats, os
async def main():
    nc = await nats.connect(
        servers=[f"nats://nats-{i}:4222" for i in (1, 2, 3)],
        user="admin", password=os.environ["NATS_PW_ADMIN"],  # SPEC SEC2: listing is the admin's
    )
    infos = await nc.jetstream().streams_info()
    print(json.dumps({s.config.name: s.config.num_replicas for s in infos}))
    await nc.close()
asyncio.run(main())
"""

pytestmark = pytest.mark.slow


def wait_for(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := fn()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.5)
    return value


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed: run scripts/install-podman (make podman)")
    env = {
        **os.environ,
        "JPU_CLUSTER_PROJECT": f"jpu-test-{uuid.uuid4().hex[:6]}",
        "JPU_CLUSTER_PORT": str(free_port()),
        "JPU_PROMETHEUS_PORT": str(free_port()),
        "JPU_CLUSTER_TIMEOUT_S": "300",
    }
    started = time.monotonic()
    up = subprocess.run(["bash", str(CLUSTER), "up"], env=env, capture_output=True, text=True)
    try:
        assert up.returncode == 0, f"cluster up failed:\n{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
        print(f"cluster up in {time.monotonic() - started:.0f} s")
        yield env
    finally:
        down = subprocess.run(
            ["bash", str(CLUSTER), "down", "-v"], env=env, capture_output=True, text=True
        )
        left = subprocess.run(
            [
                "podman",
                "ps",
                "-a",
                "-q",
                "--filter",
                f"label=io.podman.compose.project={env['JPU_CLUSTER_PROJECT']}",
            ],
            capture_output=True,
            text=True,
        ).stdout.split()
        networks = subprocess.run(
            ["podman", "network", "ls", "--noheading", "--format", "{{.Name}}",
             "--filter", f"label=io.podman.compose.project={env['JPU_CLUSTER_PROJECT']}"],
            capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        assert down.returncode == 0 and not left, f"cluster down left {left}: {down.stderr}"
        assert not networks, f"cluster down left the network(s) {networks}"
        # SPEC O2: services first, then the servers; each drains and exits 0 on SIGTERM
        assert "every container exited 0" in down.stdout, down.stdout


def admin_tool(env: dict[str, str], *args: str) -> str:
    """`scripts/cluster admin …`: the admin tool in a gateway container as the NATS admin
    identity — how an operator makes the first users (SPEC SEC3: a deployment seeds no demo
    identity, and identity changes are events only the admin appends, SEC2)."""
    r = subprocess.run(
        ["bash", str(CLUSTER), "admin", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_compose_cluster_runs_and_charges_a_job_through_the_front_O3(
    cluster: dict[str, str],
) -> None:
    front = f"http://127.0.0.1:{cluster['JPU_CLUSTER_PORT']}"
    with httpx.Client(base_url=front, timeout=10) as anon:  # SPEC SEC3: no demo token here
        assert anon.get("/v1/me", headers={"Authorization": "Bearer demo-admin"}).status_code == 401
    admin_tool(cluster, "lab", "add", "BCG")
    admin_tool(cluster, "user", "add", "bcg-alice", "--lab", "BCG")
    auth = {
        "Authorization": f"Bearer {admin_tool(cluster, 'token', 'create', 'bcg-alice').strip()}"
    }
    with httpx.Client(base_url=front, headers=auth, timeout=10) as api:
        r = api.post(
            "/v1/jobs",
            json={"name": "compose", "command": "sleep 1", "num_gpus": 1},
            headers={"Idempotency-Key": uuid.uuid4().hex},
        )
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

        def job() -> dict[str, Any]:
            return dict(api.get(f"/v1/jobs/{job_id}").json())

        done = wait_for(lambda: (j := job())["state"] in TERMINAL and j, 60, "the job's end")
        assert done["state"] == "COMPLETED" and done["exit_code"] == 0, done
        charged = wait_for(lambda: (j := job())["usage_charged"] > 0 and j, 30, "its charge")

        def bcg() -> dict[str, Any]:
            labs = api.get("/v1/labs").json()["labs"]
            return dict(next(lab for lab in labs if lab["lab"] == "BCG"))

        lab = wait_for(lambda: (x := bcg())["raw_value"] > 0 and x, 30, "BCG's usage")
        # a fresh deployment: the lab's whole usage is this one job's charge (SPEC F1/F4)
        assert lab["raw_value"] == pytest.approx(charged["usage_charged"], rel=1e-9), lab
        # the other gateway behind the front answers the same (round robin: two reads)
        assert {api.get(f"/v1/jobs/{job_id}").json()["state"] for _ in range(2)} == {"COMPLETED"}


def _admin_password() -> str:
    """scripts/cluster generated it (SPEC SEC2)."""
    return str(json.loads((ROOT / ".jpu" / "secrets" / "nats.json").read_text())["users"]["admin"])


def test_compose_cluster_replicates_the_stream_and_every_bucket_3x_O3(
    cluster: dict[str, str],
) -> None:
    images = dict(line.split("=", 1) for line in (ROOT / ".jpu" / "images.env").read_text().split())
    out = subprocess.run(
        [
            "podman",
            "run",
            "--rm",
            "--network",
            f"{cluster['JPU_CLUSTER_PROJECT']}_default",
            "--env",
            f"NATS_PW_ADMIN={_admin_password()}",
            images["JPU_SERVICE_IMAGE"],
            "python",
            "-c",
            STREAMS_PY,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    replicas = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"JPU", "JPU_DLQ"} <= set(replicas), replicas
    assert any(name.startswith("KV_") for name in replicas), replicas
    assert all(n == 3 for n in replicas.values()), replicas


def test_compose_cluster_prometheus_scrapes_every_copy_of_every_service_O4(
    cluster: dict[str, str],
) -> None:
    """The deployment's Prometheus finds each copy of each service by DNS and scrapes it; the
    queue length, cycle time and projection lag are there to query."""
    services = yaml.safe_load((ROOT / "compose" / "docker-compose.yml").read_text())["services"]
    copies = {
        name: svc.get("deploy", {}).get("replicas", 1)
        for name, svc in services.items()
        if any(str(part).startswith("jpu_services.") for part in svc.get("command", []))
    }
    prometheus = f"http://127.0.0.1:{cluster['JPU_PROMETHEUS_PORT']}"

    def query(expr: str) -> dict[str, float]:
        r = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=10)
        assert r.status_code == 200, r.text
        return {
            next(iter(s["metric"].values()), ""): float(s["value"][1])
            for s in r.json()["data"]["result"]
        }

    up = 'count by (service) (up{service!=""} == 1)'
    wait_for(lambda: query(up) == copies, 90, f"{copies} up in {prometheus}")
    wait_for(lambda: query("max by (state) (jpu_queue_length)"), 60, "the queue length")
    wait_for(
        lambda: query("sum by (le) (jpu_dispatch_cycle_duration_seconds_bucket)"), 60, "cycles"
    )
    lag = wait_for(lambda: query("max by (projection) (jpu_projection_lag)"), 60, "projection lag")
    assert {"jobs", "lab_usage"} <= lag.keys() and all(v >= 0 for v in lag.values()), lag


def test_compose_cluster_a_scaled_out_gateway_gets_its_share_through_the_front(
    cluster: dict[str, str],
) -> None:
    """Issue 34: the front finds the gateways by the network's DNS, so a third copy added with
    `scripts/cluster up --scale gateway=3` gets requests without a new front image; the fixture's
    `down -v` then has to stop and remove that copy too (and the network), or fail. Last in the
    module: it changes the number of gateways the tests above count."""
    up = subprocess.run(
        ["bash", str(CLUSTER), "up", "--scale", "gateway=3"],
        env=cluster, capture_output=True, text=True,
    )  # fmt: skip
    assert up.returncode == 0, f"{up.stdout[-4000:]}\n{up.stderr[-4000:]}"
    project = cluster["JPU_CLUSTER_PROJECT"]
    gateways = [f"{project}_gateway_{n}" for n in (1, 2, 3)]

    def served() -> dict[str, float]:  # each gateway's own count of /healthz answered
        counts = {}
        for name in gateways:
            metrics = subprocess.run(
                ["podman", "exec", name, "python", "-c",
                 "import urllib.request as u;"
                 "print(u.urlopen('http://127.0.0.1:8080/metrics').read().decode())"],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
            counts[name] = sum(
                float(line.rsplit(" ", 1)[1])
                for line in metrics.splitlines()
                if line.startswith("http_server_request_duration_seconds_count")
                and 'http_route="/healthz"' in line
            )
        return counts

    before = served()
    front = f"http://127.0.0.1:{cluster['JPU_CLUSTER_PORT']}"

    def every_gateway_served() -> bool:
        for _ in range(30):
            assert httpx.get(f"{front}/healthz", timeout=10).status_code == 200
        after = served()
        return all(after[g] > before[g] for g in gateways)

    wait_for(every_gateway_served, 60, f"each of {gateways} serving through the front")
