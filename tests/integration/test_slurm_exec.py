"""SPEC U6 (honoured -o/-e/--open-mode/--signal) and U7 (Slurm's environment, `srun`) on real
jobs through the local backend: as the user's account (uid-netns) and in a podman container."""

from __future__ import annotations

import os
import pwd
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.backends.local.backend import LocalBackend
from jpu.domain import arrays
from jpu.testing.local_world import NODE, TIER, LocalWorld, root_dir
from jpu.testing.waits import wait_end

RUNTIMES = ["uid-netns", "container"]


@pytest_asyncio.fixture(params=RUNTIMES)
async def world(request: pytest.FixtureRequest) -> AsyncIterator[LocalWorld]:
    if request.param == "container":
        assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    w = LocalWorld("jpu-sx", isolation=request.param)
    try:
        yield w
    finally:
        await w.aclose()


@pytest.fixture
def project() -> Iterator[Path]:
    """The user's own project directory: where sbatch would have been run."""
    path = root_dir("jpu-sx-project-")
    if os.getuid() == 0:
        alice = pwd.getpwnam("jpu-alice")
        os.chown(path, alice.pw_uid, alice.pw_gid)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _alice_uid() -> int:
    return pwd.getpwnam("jpu-alice").pw_uid if os.getuid() == 0 else os.getuid()


async def _run(backend: LocalBackend, spec: object, timeout: float = 90) -> tuple[str, str]:
    from jpu.backends import LaunchSpec

    assert isinstance(spec, LaunchSpec)
    status = await wait_end(backend, await backend.submit(spec), timeout)
    out = Path(spec.output_dir)
    stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
    assert status.state in ("COMPLETED", "TIMEOUT"), (status, stdout, stderr)
    return stdout, stderr


async def test_U6_output_files_expand_patterns_in_the_workdir_as_the_jobs_account(
    world: LocalWorld, project: Path
) -> None:
    backend = world.backend()
    spec = world.spec(
        "echo to-out; echo to-err >&2", chdir=str(project), name="train",
        output="out_%j_%x_%u_%N_%%.txt", error="err_%j.txt",
    )  # fmt: skip
    stdout, stderr = await _run(backend, spec)
    assert stdout == "to-out\n" and stderr == "to-err\n"  # the platform's own logs stay
    out_file = project / f"out_{spec.job_id}_train_alice_{NODE}_%.txt"
    err_file = project / f"err_{spec.job_id}.txt"
    assert out_file.read_text() == "to-out\n"
    assert err_file.read_text() == "to-err\n"
    assert out_file.stat().st_uid == _alice_uid()  # opened by the account, never by root
    assert err_file.stat().st_uid == _alice_uid()


async def test_U6_output_file_without_error_takes_both_streams_and_open_mode_appends(
    world: LocalWorld, project: Path
) -> None:
    backend = world.backend()
    for attempt, mode in ((1, None), (2, "append"), (3, "append")):
        spec = world.spec(
            f"echo out-{attempt}; echo err-{attempt} >&2", chdir=str(project),
            output="log.txt", open_mode=mode, attempt=attempt,
        )  # fmt: skip
        await _run(backend, spec)
    lines = sorted((project / "log.txt").read_text().split())
    assert lines == ["err-1", "err-2", "err-3", "out-1", "out-2", "out-3"]
    spec = world.spec("echo again", chdir=str(project), output="log.txt", attempt=4)
    await _run(backend, spec)
    assert (project / "log.txt").read_text() == "again\n"  # truncate: Slurm's default


async def test_U6_output_file_the_account_cannot_open_is_a_line_not_a_failure(
    world: LocalWorld, project: Path
) -> None:
    backend = world.backend()
    spec = world.spec("echo ran", chdir=str(project), output="no-such-dir/out.txt")
    stdout, stderr = await _run(backend, spec)
    assert stdout == "ran\n"
    assert "cannot open -o no-such-dir/out.txt" in stderr


async def test_U6_signal_B_reaches_the_batch_shell_T_seconds_before_the_limit(
    world: LocalWorld, project: Path
) -> None:
    """`--signal=B:USR1@5` with a 12 s limit: the script's trap runs 7 s after start."""
    backend = world.backend()
    script = (
        "start=$EPOCHREALTIME\n"
        'trap \'echo "usr1 after $(( ${EPOCHREALTIME/./} - ${start/./} ))us"; '
        "echo step-42 > ckpt; exit 0' USR1\n"
        "sleep 60 & wait\n"
    )
    spec = world.spec(script, chdir=str(project), signal="B:USR1@5", time_limit_s=12.0)
    begun = time.monotonic()
    stdout, stderr = await _run(backend, spec)
    assert (project / "ckpt").read_text() == "step-42\n", (stdout, stderr)
    after_us = int(stdout.split("usr1 after ")[1].split("us")[0])
    assert 7.0 - 1.5 < after_us / 1e6 < 7.0 + 1.5, stdout
    assert time.monotonic() - begun < 12.0  # the trap ended it before the limit


async def test_U6_signal_default_reaches_the_jobs_processes_not_the_batch_shell(
    world: LocalWorld, project: Path
) -> None:
    """Without `B:` Slurm signals the steps (`srun …`), not the batch shell: a batch shell with
    no trap survives, the step's trap runs."""
    backend = world.backend()
    script = (
        'srun --ntasks=1 bash -c \'trap "echo step-got-usr1 > step.txt; exit 0" USR1; '
        "sleep 60 & wait'\n"
        "echo shell-alive\n"
    )
    spec = world.spec(script, chdir=str(project), signal="USR1@4", time_limit_s=7.0)
    stdout, stderr = await _run(backend, spec)
    assert (project / "step.txt").read_text() == "step-got-usr1\n", (stdout, stderr)
    assert stdout == "shell-alive\n", stderr


async def test_U7_env_has_slurms_variables_and_srun_runs_the_command_once(
    world: LocalWorld, project: Path
) -> None:
    backend = world.backend()
    script = (
        'echo "id=$SLURM_JOB_ID name=$SLURM_JOB_NAME dir=$SLURM_SUBMIT_DIR"\n'
        'echo "nodes=$SLURM_JOB_NUM_NODES ntasks=$SLURM_NTASKS cpus=$SLURM_CPUS_PER_TASK"\n'
        'echo "gpus=$SLURM_GPUS on=$SLURM_GPUS_ON_NODE list=$SLURM_JOB_GPUS"\n'
        'echo "nodelist=$SLURM_JOB_NODELIST part=$SLURM_JOB_PARTITION"\n'
        'echo "restart=$SLURM_RESTART_COUNT"\n'
        "srun -N 1 -n 1 --gres=gpu:2 --cpu-bind none echo once\n"
        'bash -c "srun echo nested"\n'
    )
    spec = world.spec(script, chdir=str(project), name="bert", gpus=[0, 1], cpus=16, attempt=3)
    stdout, _ = await _run(backend, spec)
    assert stdout.splitlines() == [
        f"id={spec.job_id} name=bert dir={project}",
        "nodes=1 ntasks=1 cpus=16",
        "gpus=2 on=2 list=0,1",
        f"nodelist={NODE} part={TIER}",
        "restart=2",
        "once",
        "nested",
    ]


async def test_U6_U7_array_tasks_write_one_file_each_and_see_the_arrays_variables(
    world: LocalWorld, project: Path
) -> None:
    """`-o %A_%a.out` gives one file per task (the env is what the fold gives a task, Q7)."""
    backend = world.backend()
    script = (
        'echo "task=$SLURM_ARRAY_TASK_ID of=$SLURM_ARRAY_JOB_ID n=$SLURM_ARRAY_TASK_COUNT '
        'min=$SLURM_ARRAY_TASK_MIN max=$SLURM_ARRAY_TASK_MAX step=$SLURM_ARRAY_TASK_STEP"\n'
    )
    for k in (3, 5):
        spec = world.spec(
            script, chdir=str(project), output="%A_%a.out", array_job_id="arr9",
            array_task_id=k, env=arrays.env_for("arr9", k, [1, 3, 5]),
        )  # fmt: skip
        await _run(backend, spec)
    for k in (3, 5):
        assert (project / f"arr9_{k}.out").read_text() == (
            f"task={k} of=arr9 n=3 min=1 max=5 step=2\n"
        )
