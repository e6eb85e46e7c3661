"""SPEC U6 (-o/-e/--open-mode/--signal honoured) and U7 (the platform's SLURM_* over Slurm's own
where they differ, Slurm's own `srun`) through the Slurm backend on the real test cluster."""

from __future__ import annotations

import os
import pwd
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import SlurmEnv, root_dir, wait_end


@pytest.fixture
def project() -> Iterator[Path]:
    path = root_dir("jpu-slurm-project-")
    if os.getuid() == 0:
        alice = pwd.getpwnam("jpu-alice")
        os.chown(path, alice.pw_uid, alice.pw_gid)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("isolation", ["auto", "none"])
async def test_U7_slurm_backend_job_sees_the_platforms_job_id_and_runs_srun(
    slurm: SlurmEnv, project: Path, isolation: str
) -> None:
    """srun is Slurm's own (with Slurm's job id) where the job can reach slurmctld, the shim
    where it cannot (no network, X4): once, either way."""
    backend = slurm.new_backend(isolation=isolation)
    script = (
        'echo "id=$SLURM_JOB_ID name=$SLURM_JOB_NAME dir=$SLURM_SUBMIT_DIR"\n'
        'echo "part=$SLURM_JOB_PARTITION restart=$SLURM_RESTART_COUNT ntasks=$SLURM_NTASKS"\n'
        'echo "gpus=$SLURM_GPUS_ON_NODE"\n'
        "srun -n 1 echo once\n"
    )
    spec = slurm.spec(script, chdir=str(project), name="bert", attempt=2)
    bid = await backend.submit(spec)
    status = await wait_end(backend, bid, 60)
    out = Path(spec.output_dir)
    stdout = (out / "stdout").read_text()
    assert status.state == "COMPLETED", (stdout, (out / "stderr").read_text())
    assert stdout.splitlines() == [
        f"id={spec.job_id} name=bert dir={project}",  # not Slurm's own job id (bid)
        f"part={spec.tier} restart=1 ntasks=1",
        "gpus=1",
        "once",
    ], bid


@pytest.mark.parametrize("isolation", ["auto", "container"])
async def test_U6_slurm_backend_output_file_and_signal_before_the_limit(
    slurm: SlurmEnv, project: Path, isolation: str, request: pytest.FixtureRequest
) -> None:
    """`-o out_%j.txt` and `--signal=B:USR1@55` with a one-minute limit: the trap runs ~5 s in,
    in the allocation and in the node helper's podman container (X4a)."""
    if isolation == "container":
        request.getfixturevalue("podman_helper")
    backend = slurm.new_backend(isolation=isolation)
    script = (
        "start=$EPOCHREALTIME\n"
        "trap 'echo \"usr1 after $(( ${EPOCHREALTIME/./} - ${start/./} ))us\"; exit 0' USR1\n"
        "echo to-out; echo to-err >&2\n"
        "sleep 120 & wait\n"
    )
    spec = slurm.spec(
        script, chdir=str(project), output="out_%j.txt", error="err_%x.txt", name="ck",
        signal="B:USR1@55", time_limit_s=60.0,
    )  # fmt: skip
    status = await wait_end(backend, await backend.submit(spec), 60)
    out = Path(spec.output_dir)
    stdout = (out / "stdout").read_text()
    assert status.state == "COMPLETED", (stdout, (out / "stderr").read_text())
    copied = (project / f"out_{spec.job_id}.txt").read_text()
    assert copied.startswith("to-out\nusr1 after ") and copied == stdout
    assert (project / "err_ck.txt").read_text() == "to-err\n"
    after_s = int(stdout.split("usr1 after ")[1].split("us")[0]) / 1e6
    assert 5.0 - 2.0 < after_s < 5.0 + 2.0, stdout
    if os.getuid() == 0:
        assert (project / "err_ck.txt").stat().st_uid == pwd.getpwnam("jpu-alice").pw_uid
