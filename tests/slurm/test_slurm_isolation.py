"""SPEC X4 through the real Slurm backend on the real test cluster: with Apptainer configured the
batch wrapper execs `apptainer exec --containall --net --network none …` as the user's account,
with the job's variables and Slurm's GPUs inside (a stand-in `apptainer` program, see
jpu.testing.apptainer_standin: the real runtime is not installable here), and an unusable
configuration is an error when the backend starts."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpu.backends import BackendError
from jpu.backends.isolation import Apptainer
from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings
from jpu.backends.slurm.jobs import parse_comment
from jpu.backends.supervise import ARGV as SUPERVISOR
from jpu.testing.apptainer_standin import standin_report, write_standin
from jpu.testing.slurm_env import SlurmEnv, wait_end
from jpu.testing.stack_process import world_searchable_tmpdir

PROBE = (
    'echo "att=$JOB_ATTEMPT cvd=$CUDA_VISIBLE_DEVICES out=$JOB_OUTPUT_DIR id=$JPU_JOB_ID"\n'
    'echo "mine=$MY_VAR slurm_job=$SLURM_JOB_ID"\n'
    "cat /proc/net/dev > netdev.txt\n"
    "id -u > uid.txt\n"
    '(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && echo connect=ok || echo connect=failed\n'
)


@pytest.fixture
def tools(slurm: SlurmEnv) -> Iterator[tuple[Path, Path]]:
    """The stand-in apptainer and an image file, where the job's account can read them."""
    directory = slurm.out_root.with_name(slurm.out_root.name + "-tools")
    standin = write_standin(directory)
    image = directory / "image.sif"
    image.write_bytes(b"SIF stand-in")
    image.chmod(0o644)
    try:
        yield standin, image
    finally:
        shutil.rmtree(directory, ignore_errors=True)


async def test_X4_slurm_job_runs_in_apptainer_as_the_user_without_network(
    slurm: SlurmEnv, tools: tuple[Path, Path]
) -> None:
    standin, image = tools
    backend = slurm.new_backend(apptainer=Apptainer(str(image), str(standin), ("--nv",)))
    with socket.create_server(("127.0.0.1", 0)) as server:  # reachable only with a network
        port = server.getsockname()[1]
        spec = slurm.spec(PROBE, num_gpus=2, attempt=3, env={"MY_VAR": "a,b c", "PORT": str(port)})
        bid = await backend.submit(spec)
        status = await wait_end(backend, bid, 30)
    out = Path(spec.output_dir)
    stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
    assert status.state == "COMPLETED", (stdout, stderr)
    assert status.isolation == "container:apptainer"  # what JobStarted records
    # X2 through --cleanenv: the platform's variables, the user's, and Slurm's GPUs and job id
    assert f"att=3 cvd=0,1 out={out} id={spec.job_id}" in stdout
    # U7: SLURM_JOB_ID is the platform's job id (Slurm's own, `bid`, stays for its srun)
    assert f"mine=a,b c slurm_job={spec.job_id}" in stdout, bid
    report = standin_report(stderr)
    argv = report["argv"]
    assert isinstance(argv, list)
    assert argv[:6] == ["exec", "--containall", "--net", "--network", "none", "--no-eval"]
    n = len(SUPERVISOR) + 4  # U6/U7: the supervisor runs the script inside (supervise.py)
    assert argv[-n:] == ["--nv", str(image), *SUPERVISOR, "/bin/bash", f"{out}/job.sh"]
    if os.getuid() == 0:  # sbatch as the user's mapped account: apptainer runs as it
        assert int((out / "uid.txt").read_text()) == pwd.getpwnam("jpu-alice").pw_uid
    if report["netns"]:
        lines = (out / "netdev.txt").read_text().splitlines()
        assert [ln.split(":")[0].strip() for ln in lines if ":" in ln] == ["lo"]  # lo only
        assert "connect=failed" in stdout
    # the isolation is also in the Slurm comment: an agent that lost its records still knows it
    jobs = await backend.snapshot(0.0, full=True)
    job = jobs[int(bid)]  # ended jobs stay listed for the test cluster's MinJobAge (900 s)
    assert parse_comment(job.comment)[0] == "container:apptainer"


async def test_X4_slurm_unusable_apptainer_is_an_error_at_start(
    slurm: SlurmEnv, tools: tuple[Path, Path]
) -> None:
    standin, image = tools
    conf = slurm.cluster.conf
    with pytest.raises(BackendError, match=r"apptainer_image .* does not exist"):
        SlurmBackend(
            SlurmSettings(slurm.data_dir, conf, apptainer=Apptainer("/no/such.sif", str(standin)))
        )
    with pytest.raises(BackendError, match=r"apptainer_bin .* not an executable"):
        SlurmBackend(
            SlurmSettings(slurm.data_dir, conf, apptainer=Apptainer(str(image), "/no/apptainer"))
        )
    with pytest.raises(BackendError, match="needs apptainer_image"):
        SlurmBackend(SlurmSettings(slurm.data_dir, conf, isolation="apptainer"))


async def test_U5_slurm_apptainer_job_binds_its_chdir_and_starts_there(
    slurm: SlurmEnv, tools: tuple[Path, Path]
) -> None:
    standin, image = tools
    project = world_searchable_tmpdir("jpu-slurm-chdir-")
    (project / "hello.txt").write_text("inside\n")
    (project / "hello.txt").chmod(0o644)
    try:
        backend = slurm.new_backend(apptainer=Apptainer(str(image), str(standin)))
        spec = slurm.spec('cat hello.txt; echo "pwd=$(pwd)"', chdir=str(project))
        status = await wait_end(backend, await backend.submit(spec), 30)
        out = Path(spec.output_dir)
        stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
        assert status.state == "COMPLETED", (stdout, stderr)
        assert stdout == f"inside\npwd={project}\n"
        argv = standin_report(stderr)["argv"]
        assert isinstance(argv, list)
        i = argv.index("--no-eval")
        assert argv[i + 1 : i + 7] == ["--bind", str(out), "--bind", str(project), "--pwd",
                                       str(project)]  # fmt: skip
    finally:
        shutil.rmtree(project, ignore_errors=True)
