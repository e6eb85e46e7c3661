"""The Slurm backend's test helpers (tests/slurm): a job environment on the test cluster
(jpu.testing.slurm_fixtures' `slurm_cluster`), its launch specs, and the waits. Test modules
import them from here (a conftest is pytest's, not an import path); the fixtures stay in
tests/slurm/conftest.py.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from jpu.backends import BackendStatus, LaunchSpec
from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings
from jpu.testing.slurm_fixtures import SlurmCluster
from jpu.testing.waits import wait_end as _wait_end

TIERS = {"rtx4090": (8, 32), "rtx3080ti": (6, 24)}  # cpus_per_gpu, mem_gb_per_gpu (default.yaml)


def root_dir(prefix: str) -> Path:
    """Under /tmp with mode 0711: a job's account must be able to reach its output dir."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)
    return path


@dataclass
class SlurmEnv:
    cluster: SlurmCluster
    data_dir: Path = field(default_factory=lambda: root_dir("jpu-slurm-data-"))
    out_root: Path = field(default_factory=lambda: root_dir("jpu-slurm-out-"))
    backends: list[SlurmBackend] = field(default_factory=list)
    _n: int = 0

    def new_backend(self, **kw: object) -> SlurmBackend:
        settings = {"data_dir": self.data_dir, "conf": self.cluster.conf, "timeout_grace_s": 1.0}
        settings.update(kw)
        backend = SlurmBackend(SlurmSettings(**settings))  # type: ignore[arg-type]
        self.backends.append(backend)
        return backend

    def spec(
        self, command: str, node: str = "gpu-4090x2-01", num_gpus: int = 1, **kw: object
    ) -> LaunchSpec:
        self._n += 1
        job_id = str(kw.pop("job_id", f"s{os.getpid()}x{self._n}x{time.monotonic_ns()}"))
        attempt = int(kw.pop("attempt", 1))  # type: ignore[call-overload]
        tier = self.cluster.nodes[node][0]
        cpus, mem = TIERS[tier]
        return LaunchSpec(
            job_id=job_id, attempt=attempt, user=str(kw.pop("user", "alice")), node=node,
            tier=tier, gpus=list(range(num_gpus)), num_gpus=num_gpus, command=command,
            cpus=num_gpus * cpus, mem_gb=num_gpus * mem, partition=tier,
            output_dir=str(self.out_root / job_id / str(attempt)), **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    async def close(self) -> None:
        try:
            for backend in self.backends:
                for bid in await backend.running():  # leave nothing running behind
                    await backend.cancel(bid, 0.0)
                    await wait_end(backend, bid, 15)
                await backend.close()
        finally:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            shutil.rmtree(self.out_root, ignore_errors=True)


async def wait_end(backend: SlurmBackend, bid: str, timeout: float = 20.0) -> BackendStatus:
    return await _wait_end(backend, bid, timeout, every_s=0.1)  # Slurm: no need to hurry


async def wait_file(path: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


def unreachable_conf(slurm: SlurmEnv, directory: Path) -> Path:
    """The cluster's slurm.conf with a slurmctld port nobody listens on (and a short timeout)."""
    conf = Path(slurm.cluster.conf).read_text()
    port = next(line for line in conf.splitlines() if line.startswith("SlurmctldPort="))
    wrong = directory / "slurm.conf"
    wrong.write_text(conf.replace(port, "SlurmctldPort=9\nMessageTimeout=2"))
    return wrong


@dataclass
class NativeTimeout:
    env: SlurmEnv
    backend: SlurmBackend
    backend_job_id: str
    spec: LaunchSpec
    submitted_at: float
