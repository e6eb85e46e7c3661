"""A local backend on the default nodes with its own data and output directories, for the
isolation tests (SPEC X4, X4a): settings per backend, one LaunchSpec per job, and a teardown
that ends every job still running (containers included) before removing the directories."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from jpu.backends import LaunchSpec
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.config import load_config
from jpu.testing.waits import wait_end

NODE, TIER = "gpu-4090x2-01", "rtx4090"


def root_dir(prefix: str) -> Path:
    """Under /tmp with mode 0711: a job's account must be able to reach its output dir."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)
    return path


class LocalWorld:
    def __init__(self, prefix: str = "jpu-iso", **defaults: Any) -> None:
        self.data_dir = root_dir(f"{prefix}-data-")
        self.out_root = root_dir(f"{prefix}-out-")
        self.tools = root_dir(f"{prefix}-tools-")
        self.tools.chmod(0o755)
        self.defaults = defaults  # LocalSettings every backend of this world gets
        self.backends: list[LocalBackend] = []
        self._prefix = prefix.removeprefix("jpu-")  # job ids like iso<pid>x<n>x<ns>
        self._n = 0

    def backend(self, **kw: Any) -> LocalBackend:
        settings = LocalSettings(
            data_dir=self.data_dir, nodes=list(load_config(env={}).nodes), timeout_grace_s=1.0,
            **{**self.defaults, **kw},
        )  # fmt: skip
        backend = LocalBackend(settings)
        self.backends.append(backend)
        return backend

    def spec(self, command: str, user: str = "alice", **kw: Any) -> LaunchSpec:
        self._n += 1
        job_id = f"{self._prefix}{os.getpid()}x{self._n}x{time.monotonic_ns()}"
        gpus = list(kw.pop("gpus", [1]))
        return LaunchSpec(
            job_id=job_id, attempt=int(kw.pop("attempt", 1)), user=user, node=NODE, tier=TIER,
            gpus=gpus, num_gpus=len(gpus), command=command,
            output_dir=str(self.out_root / job_id / "1"), **kw,
        )  # fmt: skip

    async def aclose(self, timeout_s: float = 30.0) -> None:
        for b in self.backends:
            for bid in await b.running():
                await b.cancel(bid, 0.0)
                await wait_end(b, bid, timeout_s)
            await b.close()
        for path in (self.data_dir, self.out_root, self.tools):
            shutil.rmtree(path, ignore_errors=True)
