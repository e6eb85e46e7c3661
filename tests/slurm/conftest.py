"""The Slurm backend against the real multi-node test cluster (`slurm_cluster`, a session fixture
of jpu.testing.slurm_fixtures: started on first use, stopped at the end of the session).

Slurm's shortest time limit is one minute and slurmctld checks limits about every 30 s, so the
test of Slurm's own TIMEOUT needs 60–90 s: its job is submitted when the first test here starts
(`native_timeout_job`, autouse) and checked by the last module (test_time_limit.py), so the
wait overlaps the other tests instead of adding to them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.testing.slurm_env import NativeTimeout, SlurmEnv
from jpu.testing.slurm_fixtures import SCRIPT, SlurmCluster


@pytest_asyncio.fixture
async def slurm(slurm_cluster: SlurmCluster) -> AsyncIterator[SlurmEnv]:
    env = SlurmEnv(slurm_cluster)
    try:
        yield env
    finally:
        await env.close()


@pytest_asyncio.fixture(scope="session", autouse=True)
async def native_timeout_job(slurm_cluster: SlurmCluster) -> AsyncIterator[NativeTimeout]:
    """A job with a one-minute limit (whole minutes: Slurm enforces it, not the backend)."""
    env = SlurmEnv(slurm_cluster)
    backend = env.new_backend()
    spec = env.spec("echo started; sleep 600", node="gpu-3080tix2-01", time_limit_s=60.0)
    bid = await backend.submit(spec)
    try:
        yield NativeTimeout(env, backend, bid, spec, time.time())
    finally:
        await env.close()


@pytest.fixture(scope="session")
def podman_helper(slurm_cluster: SlurmCluster) -> None:
    """The nodes' podman helper (SPEC X4a), installed as a site would: sudo, the shim, its
    config, the sudoers rule (scripts/slurm-testcluster podman-helper). No podman: a failure.
    Its config names this cluster's slurm.conf (SEC6: it reads each job's allocation)."""
    assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    env = {**os.environ, "JPU_SLURM_DIR": str(Path(slurm_cluster.conf).parent)}
    done = subprocess.run(
        ["bash", str(SCRIPT), "podman-helper", sys.executable],
        capture_output=True, text=True, timeout=600, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
