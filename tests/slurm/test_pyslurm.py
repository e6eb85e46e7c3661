"""SPEC X9: pyslurm reads the jobs where its version matches the cluster's Slurm; here (Debian's
Slurm 22.05, PyPI's pyslurm 25.11) it cannot, and the backend reads them through squeue."""

from __future__ import annotations

import re

from jpu.backends.slurm.pyslurm_api import cluster_version, pyslurm_usable
from jpu.testing.slurm_env import SlurmEnv, wait_end
from jpu.testing.unavailable import skip_unless_required


async def test_X9_pyslurm_reads_the_jobs_where_it_matches_the_cluster(slurm: SlurmEnv) -> None:
    backend = slurm.new_backend(pyslurm="auto")
    usable, why = pyslurm_usable(await cluster_version(backend.cli))
    if not usable:  # the one skip-or-fail rule: JPU_TEST_PYSLURM_REQUIRED=1 makes it a failure
        skip_unless_required("pyslurm", f"pyslurm path not testable on this cluster: {why}")
    status = await wait_end(backend, await backend.submit(slurm.spec("exit 3")))
    assert backend._reader == "pyslurm"
    assert status.state == "FAILED" and status.exit_code == 3


async def test_X9_without_a_matching_pyslurm_the_cli_reads_the_jobs(slurm: SlurmEnv) -> None:
    backend = slurm.new_backend(pyslurm="auto")
    version = await cluster_version(backend.cli)
    assert re.fullmatch(r"\d+\.\d+", version), version  # "22.5" for Debian 12's 22.05.8
    usable, why = pyslurm_usable(version)
    status = await wait_end(backend, await backend.submit(slurm.spec("exit 3")))
    assert status.state == "FAILED" and status.exit_code == 3
    assert backend._reader == ("pyslurm" if usable else "squeue"), why
