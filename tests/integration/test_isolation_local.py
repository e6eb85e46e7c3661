"""SPEC X4 through the real local backend: Apptainer when configured (a stand-in `apptainer`
program, see jpu.testing.apptainer_standin, because the real one is not installable here; the
real one where it exists), a clear error when configured but unusable, and the root side of the
launch chain never steered by the user's environment."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.backends import BackendError
from jpu.backends.isolation import Apptainer
from jpu.backends.supervise import ARGV as SUPERVISOR
from jpu.testing.apptainer_standin import standin_report, write_standin
from jpu.testing.local_world import LocalWorld, root_dir
from jpu.testing.unavailable import skip_unless_required
from jpu.testing.waits import wait_end

PROBE = (
    'echo "att=$JOB_ATTEMPT cvd=$CUDA_VISIBLE_DEVICES out=$JOB_OUTPUT_DIR id=$JPU_JOB_ID"\n'
    'echo "mine=$MY_VAR evil=$EVIL pwd=$(pwd)"\n'
    "cat /proc/net/dev > netdev.txt\n"
    "id -u > uid.txt\n"
    '(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && echo connect=ok || echo connect=failed\n'
)


World = LocalWorld


@pytest_asyncio.fixture
async def world() -> AsyncIterator[World]:
    w = LocalWorld()
    try:
        yield w
    finally:
        await w.aclose(10)


@pytest.fixture
def listener() -> Iterator[int]:
    """A port that accepts connections on the host's loopback: reachable only with a network."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def _ifaces(out: Path) -> list[str]:
    lines = (out / "netdev.txt").read_text().splitlines()
    return [line.split(":")[0].strip() for line in lines if ":" in line]


async def test_X4_apptainer_job_runs_contained_as_the_user_without_network(
    world: World, listener: int
) -> None:
    standin = write_standin(world.tools)
    image = world.tools / "image.sif"
    image.write_bytes(b"SIF stand-in")
    image.chmod(0o644)
    backend = world.backend(apptainer=Apptainer(str(image), str(standin), ("--nv",)))
    marker = world.out_root / "pwned"
    spec = world.spec(
        PROBE, attempt=2, gpus=[0, 1],
        env={"MY_VAR": "hello world", "EVIL": f"$(touch {marker})", "PORT": str(listener)},
    )  # fmt: skip
    bid = await backend.submit(spec)
    status = await wait_end(backend, bid)
    out = Path(spec.output_dir)
    stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
    assert status.state == "COMPLETED", (stdout, stderr)
    assert status.isolation == "container:apptainer"  # what JobStarted records
    assert f"att=2 cvd=0,1 out={out} id={spec.job_id}" in stdout  # X2 env through --cleanenv
    assert f"mine=hello world evil=$(touch {marker}) pwd={out}" in stdout
    assert not marker.exists()  # X3: never evaluated on the way in
    report = standin_report(stderr)
    argv = report["argv"]
    assert isinstance(argv, list)
    assert argv[:6] == ["exec", "--containall", "--net", "--network", "none", "--no-eval"]
    n = len(SUPERVISOR) + 4  # U6/U7: the supervisor runs the script inside (supervise.py)
    assert argv[-n:] == ["--nv", str(image), *SUPERVISOR, "/bin/bash", f"{out}/job.sh"]
    uid = int((out / "uid.txt").read_text())
    if os.getuid() == 0:  # the user's own mapped account, never root
        assert uid == report["uid"] == pwd.getpwnam("jpu-alice").pw_uid
    if report["netns"]:  # no network: only a loopback (down); the host's port is unreachable
        assert _ifaces(out) == ["lo"] and "connect=failed" in stdout
    # a restarted agent reads the same isolation from the record
    await backend.close()
    assert (await world.backend(apptainer=backend.settings.apptainer).poll(bid)).isolation == (
        "container:apptainer"
    )


async def test_X4_configured_but_unusable_apptainer_is_an_error_at_start(world: World) -> None:
    standin = write_standin(world.tools)
    with pytest.raises(BackendError, match=r"apptainer_image .* does not exist"):
        world.backend(apptainer=Apptainer(str(world.tools / "missing.sif"), str(standin)))
    image = world.tools / "image.sif"
    image.write_bytes(b"SIF stand-in")
    with pytest.raises(BackendError, match=r"apptainer_bin .* not an executable"):
        world.backend(apptainer=Apptainer(str(image), str(world.tools / "no-apptainer")))
    with pytest.raises(BackendError, match="needs apptainer_image"):
        world.backend(isolation="apptainer")
    # explicitly off: no Apptainer, whatever is configured
    backend = world.backend(isolation="none", apptainer=Apptainer(str(image), "no-apptainer"))
    status = await wait_end(backend, await backend.submit(world.spec("true")))
    assert status.state == "COMPLETED" and status.isolation == "none"


async def test_X4_without_apptainer_the_job_records_the_isolation_it_got(
    world: World, listener: int
) -> None:
    backend = world.backend()
    spec = world.spec(PROBE, env={"PORT": str(listener)})
    status = await wait_end(backend, await backend.submit(spec))
    out = Path(spec.output_dir)
    assert status.state == "COMPLETED" and status.isolation in ("uid+netns", "none")
    if status.isolation == "uid+netns":
        assert _ifaces(out) == ["lo"]
        assert "connect=failed" in (out / "stdout").read_text()


@pytest.mark.usefixtures("as_root")  # the root side of the chain exists only as root
async def test_X4_user_env_never_steers_the_root_side_of_the_launch_chain(world: World) -> None:
    """BASH_ENV and PATH are the user's to set for the job, never for the agent's root wrapper."""
    evil = world.tools / "evil"
    evil.mkdir(mode=0o755)
    log = world.tools / "log"
    log.touch(mode=0o666)
    log.chmod(0o666)
    hook = f'echo "$(/usr/bin/id -u) $0" >> {log}\n'
    (evil / "env.sh").write_text(hook)
    for name in ("bash", "setpriv", "unshare"):  # what root would run if looked up in PATH
        (evil / name).write_text(f"#!/bin/sh\necho hijacked {name} >> {log}\n")
        (evil / name).chmod(0o755)
    (evil / "env.sh").chmod(0o644)
    backend = world.backend()
    spec = world.spec("echo ran", env={"BASH_ENV": str(evil / "env.sh"), "PATH": str(evil)})
    status = await wait_end(backend, await backend.submit(spec))
    assert status.state == "COMPLETED" and "ran" in status.output_tail
    entries = log.read_text().splitlines()
    assert not any(e.startswith("hijacked") for e in entries), entries
    assert all(not e.startswith("0 ") for e in entries), entries  # BASH_ENV never as root


PRELOAD_C = """
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void hook(void) {
    FILE *f = fopen(LOG, "a");
    if (f) { fprintf(f, "%d\\n", (int)getuid()); fclose(f); }
}
"""


@pytest.mark.usefixtures("as_root")  # the root side of the chain exists only as root
async def test_X4_user_LD_PRELOAD_reaches_the_job_but_never_a_root_process(world: World) -> None:
    """The root side of the chain starts with a clean env: a user's LD_PRELOAD (a real shared
    library that logs the UID of every process loading it) runs in the job only, as the user."""
    log = world.tools / "preload.log"
    log.touch()
    log.chmod(0o666)
    src = world.tools / "hook.c"
    src.write_text(PRELOAD_C)
    lib = world.tools / "hook.so"
    assert shutil.which("gcc"), "gcc is needed to build the preload library (apt-get install gcc)"
    cc = ["gcc", "-shared", "-fPIC", f'-DLOG="{log}"', "-o", str(lib), str(src)]
    proc = await asyncio.create_subprocess_exec(*cc)
    assert await proc.wait() == 0
    lib.chmod(0o755)
    backend = world.backend()
    spec = world.spec("/bin/true; echo ran", env={"LD_PRELOAD": str(lib)})
    status = await wait_end(backend, await backend.submit(spec))
    assert status.state == "COMPLETED" and "ran" in status.output_tail
    uids = {int(x) for x in log.read_text().split()}
    alice = pwd.getpwnam("jpu-alice").pw_uid
    assert uids == {alice}, uids  # loaded by the job's processes, by no root process
    assert not (Path(spec.output_dir) / ".jpu-env").exists()  # read and removed by the loader


async def test_X4_real_apptainer_runs_the_job_contained(world: World, listener: int) -> None:
    """With the real runtime: JPU_TEST_APPTAINER_IMAGE, else a sandbox that is only mount
    points and the host's /usr bound read-only (no image to download)."""
    if shutil.which("apptainer") is None:  # the one rule: JPU_TEST_APPTAINER_REQUIRED=1 fails
        skip_unless_required("apptainer", "apptainer is not installed here")
    image = os.environ.get("JPU_TEST_APPTAINER_IMAGE")
    args: tuple[str, ...] = ()
    if not image:
        sandbox = world.tools / "sandbox"
        for d in ("usr", "etc", "tmp", "proc", "sys", "dev", "home", "root", "var", "opt"):
            (sandbox / d).mkdir(parents=True)
        for link in ("bin", "sbin", "lib", "lib64"):
            if Path("/usr", link).exists():
                (sandbox / link).symlink_to(f"usr/{link}")
        sandbox.chmod(0o755)
        image, args = str(sandbox), ("--bind", "/usr:/usr:ro")
    backend = world.backend(apptainer=Apptainer(image, "apptainer", args))
    spec = world.spec(PROBE, gpus=[1], env={"MY_VAR": "v", "PORT": str(listener)})
    status = await wait_end(backend, await backend.submit(spec), 60)
    out = Path(spec.output_dir)
    stdout = (out / "stdout").read_text()
    assert status.state == "COMPLETED", (stdout, (out / "stderr").read_text())
    assert status.isolation == "container:apptainer"
    assert f"att=1 cvd=1 out={out} id={spec.job_id}" in stdout and "mine=v" in stdout
    assert _ifaces(out) == ["lo"] and "connect=failed" in stdout
    if os.getuid() == 0:
        assert int((out / "uid.txt").read_text()) == pwd.getpwnam("jpu-alice").pw_uid


async def test_U5_apptainer_job_starts_in_its_chdir_bound_into_the_container(
    world: World,
) -> None:
    standin = write_standin(world.tools)
    image = world.tools / "image.sif"
    image.write_bytes(b"SIF stand-in")
    image.chmod(0o644)
    project = root_dir("jpu-iso-project-")
    project.chmod(0o755)
    (project / "hello.txt").write_text("inside\n")
    (project / "hello.txt").chmod(0o644)
    try:
        backend = world.backend(apptainer=Apptainer(str(image), str(standin)))
        spec = world.spec('cat hello.txt; echo "pwd=$(pwd) wd=$JPU_WORKDIR"', chdir=str(project))
        status = await wait_end(backend, await backend.submit(spec))
        out = Path(spec.output_dir)
        stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
        assert status.state == "COMPLETED", (stdout, stderr)
        assert stdout == f"inside\npwd={project} wd={project}\n"
        argv = standin_report(stderr)["argv"]
        assert isinstance(argv, list)
        i = argv.index("--no-eval")
        assert argv[i + 1 : i + 7] == ["--bind", str(out), "--bind", str(project), "--pwd",
                                       str(project)]  # fmt: skip
    finally:
        shutil.rmtree(project, ignore_errors=True)


async def test_U5_a_chdir_the_user_cannot_enter_fails_the_job_with_the_reason(
    world: World,
) -> None:
    private = root_dir("jpu-iso-private-")
    private.chmod(0o700)  # root's own
    try:
        backend = world.backend(isolation="none")
        spec = world.spec("echo never", chdir=str(private))
        status = await wait_end(backend, await backend.submit(spec))
        out = Path(spec.output_dir)
        if os.getuid() == 0:  # jobs run as jpu-alice, who may not enter it
            assert status.state == "FAILED" and status.exit_code == 1
            assert f"jpu: cannot run in {private} (chdir)" in (out / "stderr").read_text()
            assert (out / "stdout").read_text() == ""
        with pytest.raises(BackendError, match="absolute"):
            await backend.submit(world.spec("true", chdir="relative/dir"))
    finally:
        shutil.rmtree(private, ignore_errors=True)
