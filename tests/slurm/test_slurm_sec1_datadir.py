"""SPEC SEC1 on the Slurm backend: `python -m jpu.stack run` as root (its data dir 0700) with
`slurm_backend: slurm` on the real test cluster. A Slurm job runs as the user's account, which
cannot enter the data dir: its `--chdir`/`--output` (JOB_OUTPUT_DIR) lie outside it, and its
output is served by the API. (tests/security/test_sec1_datadir.py: the local backend.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jpu.testing.nats_fixtures import unique_names
from jpu.testing.slurm_fixtures import SlurmCluster
from jpu.testing.slurm_stack import NODES
from jpu.testing.stack_process import StackProcess, remove_data_dir, world_searchable_tmpdir
from jpu.testing.unavailable import needs_root

needs_root("the stack runs as root and Slurm runs its jobs as the users' own accounts")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    d = world_searchable_tmpdir("jpu-test-sec1-slurm-")
    try:
        yield d
    finally:
        remove_data_dir(d)


def test_sec1_a_slurm_job_runs_outside_the_private_data_dir(
    nats_url: str, pg_dsn: str, slurm_cluster: SlurmCluster, data_dir: Path
) -> None:
    stream, prefix = unique_names()
    env = {
        "JPU_NATS_URL": nats_url, "JPU_DATABASE_URL": pg_dsn, "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix, "JPU_NODES": NODES, "JPU_SLURM_BACKEND": "slurm",
        "JPU_SLURM_CONF": slurm_cluster.conf, "JPU_BACKFILL_ENABLED": "false",
    }  # fmt: skip
    stack = StackProcess(env, data_dir)
    try:
        stack.wait_ready()
        assert data_dir.stat().st_mode & 0o777 == 0o700
        auth = {"Authorization": f"Bearer {stack.token('kdg-carol')}"}
        body = {"name": "sec1", "command": "pwd; echo hello-slurm", "num_gpus": 1}
        with httpx.Client(base_url=stack.url, headers=auth, timeout=10) as http:
            r = http.post("/v1/jobs", json=body)
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            deadline = time.monotonic() + 60
            while (job := http.get(f"/v1/jobs/{job_id}").json())["state"] not in (
                "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT",
            ) and time.monotonic() < deadline:  # fmt: skip
                time.sleep(0.2)
            assert job["state"] == "COMPLETED", (job, stack.log_tail())
            assert str(job["backend_job_id"]).isdigit(), job  # a Slurm job id
            out = Path(job["output_dir"])
            assert data_dir not in out.parents, out
            logs = http.get(f"/v1/jobs/{job_id}/logs").text
        assert logs == f"{out}\nhello-slurm\n", logs
    finally:
        assert stack.stop() == 0, stack.log_tail()
