"""pytest plugin: a real multi-node Slurm test cluster per session (scripts/slurm-testcluster).

List it in tests/conftest.py: `pytest_plugins = [..., "jpu.testing.slurm_fixtures"]`.
`slurm_cluster` installs the packages when missing, starts a private cluster (own directory under
/var/tmp, own munged, free ports) and stops it at the end of the session: no daemon outlives it.
It skips — with the reason — only when Slurm cannot be installed or started here (not root, no
apt-get, …); JPU_TEST_SLURM_REQUIRED=1 turns that skip into a failure (CI, where it must run).
JPU_TEST_SLURM_CONF points the tests at a running cluster instead (nothing is started or stopped;
its nodes must be the script's defaults).
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest

from jpu.testing.unavailable import skip_unless_required

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "slurm-testcluster"
NODES = {  # the script's default nodes: name → (tier, GPUs)
    "gpu-4090x2-01": ("rtx4090", 2),
    "gpu-4090x2-02": ("rtx4090", 2),
    "gpu-3080tix2-01": ("rtx3080ti", 2),
}


@dataclass(frozen=True)
class SlurmCluster:
    conf: str  # SLURM_CONF
    directory: Path
    nodes: dict[str, tuple[str, int]]
    started_at: float

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(
            ["scontrol", *args], env={**os.environ, "SLURM_CONF": self.conf},
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return done.stdout


def free_base_port(count: int) -> int:
    """`count` consecutive free TCP ports (slurmctld, then one per slurmd)."""
    for _ in range(200):
        base = random.randrange(20000, 40000)
        try:
            for port in range(base, base + count):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free port range for a Slurm test cluster")


def _script(command: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), command], env=env, capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def _unavailable(reason: str) -> NoReturn:
    skip_unless_required("slurm", f"no Slurm test cluster: {reason}")


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    conf = os.environ.get("JPU_TEST_SLURM_CONF")
    if conf:
        yield SlurmCluster(conf, Path(conf).parent, dict(NODES), time.time())
        return
    if os.getuid() != 0:
        _unavailable("needs root (munged runs as munge, slurmd as root, jobs as mapped accounts)")
    env = dict(os.environ)
    installed = _script("install", env, 600)
    if installed.returncode != 0:
        _unavailable(f"packages cannot be installed: {installed.stderr.strip()[-500:]}")
    # Under /var/tmp, not pytest's 0700 tmp: job accounts must reach the munge socket.
    directory = Path(tempfile.mkdtemp(prefix="jpu-slurm-test-", dir="/var/tmp"))
    directory.chmod(0o755)
    env.update(JPU_SLURM_DIR=str(directory), JPU_SLURM_PORT=str(free_base_port(len(NODES) + 2)))
    try:
        started = _script("start", env, 120)
        if started.returncode != 0:
            logs = "\n".join(p.read_text()[-800:] for p in directory.glob("log/*.log"))
            _unavailable(f"cluster did not start: {started.stderr.strip()[-800:]}\n{logs}")
        yield SlurmCluster(str(directory / "slurm.conf"), directory, dict(NODES), time.time())
    finally:
        _script("stop", env, 60)
        shutil.rmtree(directory, ignore_errors=True)
