"""SPEC X4, X4a, X5, O5 with the real OCI engine (podman + runc, scripts/install-podman): the
local backend runs each attempt in a container with no network, the user's UID, a read-only root,
only its own output directory writable, and the host's processes out of sight; a cancel reaches
the job inside; an agent restart adopts or ends its containers. No podman is a failure here,
never a skip: CI installs it."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.backends import BackendError, make_backend
from jpu.backends.isolation import BASE_IMAGE, Podman, container_name
from jpu.backends.local.stop import terminate_all
from jpu.config import load_config
from jpu.testing.local_world import LocalWorld, root_dir
from jpu.testing.unavailable import needs_root
from jpu.testing.waits import wait_end

PROBE = """echo "att=$JOB_ATTEMPT cvd=$CUDA_VISIBLE_DEVICES out=$JOB_OUTPUT_DIR id=$JPU_JOB_ID"
echo "mine=$MY_VAR pwd=$(pwd) uid=$(id -u) gid=$(id -g)"
for ip in $ADDRS; do
  (exec 3<>"/dev/tcp/$ip/$PORT") 2>/dev/null && echo "connect $ip=ok" || echo "connect $ip=failed"
done
touch /written-by-job 2>/dev/null && echo root=writable || echo root=read-only
cat "$OTHER/stdout" >/dev/null 2>&1 && echo other=readable || echo other=unreadable
cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' > procs.txt
"""
needs_root("rootful podman: the agent is root")


def _exists(name: str) -> bool:
    return subprocess.run(["podman", "container", "exists", name], check=False).returncode == 0


def _host_addresses() -> list[str]:
    """This machine's own IPv4 addresses (loopback and its interfaces): the only probe targets."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    return ["127.0.0.1", *(a for a in found.stdout.split() if "." in a)]


World = LocalWorld


@pytest_asyncio.fixture
async def world() -> AsyncIterator[World]:
    assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    w = LocalWorld("jpu-pod", isolation="container")
    try:
        yield w
    finally:
        await w.aclose()


@pytest.fixture
def listener() -> Iterator[int]:
    """A port open on every address of this machine (as the gateway's would be)."""
    with socket.create_server(("0.0.0.0", 0)) as server:
        yield server.getsockname()[1]


async def test_X4a_podman_job_has_no_network_the_users_uid_and_a_read_only_root(
    world: World, listener: int
) -> None:
    backend = world.backend()
    other = world.spec("echo bob-secret", user="bob")  # another user's output directory
    assert (await wait_end(backend, await backend.submit(other), 60)).state == "COMPLETED"
    addrs = _host_addresses()
    for ip in addrs:  # the probe's control: from the host every address answers
        socket.create_connection((ip, listener), timeout=5).close()
    env = {"MY_VAR": "hello world", "PORT": str(listener), "ADDRS": " ".join(addrs)}
    spec = world.spec(PROBE, attempt=2, gpus=[0, 1], env={**env, "OTHER": other.output_dir})
    status = await wait_end(backend, await backend.submit(spec), 60)
    out = Path(spec.output_dir)
    stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
    assert status.state == "COMPLETED", (stdout, stderr)
    assert status.isolation == "container:podman"  # what JobStarted records
    assert f"att=2 cvd=0,1 out={out} id={spec.job_id}" in stdout  # X2 inside the container
    alice = pwd.getpwnam("jpu-alice")
    assert f"mine=hello world pwd={out} uid={alice.pw_uid} gid={alice.pw_gid}" in stdout
    assert all(f"connect {ip}=failed" in stdout for ip in addrs), stdout
    assert "root=read-only" in stdout and not Path("/written-by-job").exists()
    assert "other=unreadable" in stdout
    procs = (out / "procs.txt").read_text()
    assert "pytest" not in procs and "jpu-job" not in procs, procs  # host processes unseen
    assert "bash" in procs  # the control: the job sees its own processes
    assert not _exists(container_name(f"local-{spec.job_id}-2"))  # --rm: nothing left


async def test_X5_podman_cancel_reaches_the_job_which_checkpoints_within_the_grace(
    world: World,
) -> None:
    backend = world.backend()
    script = (
        'trap \'echo "step 7" > "$JOB_OUTPUT_DIR/ckpt"; echo checkpointed; exit 0\' TERM\n'
        "echo started\n"
        "while :; do sleep 0.1; done\n"
    )
    spec = world.spec(script)
    bid = await backend.submit(spec)
    out = Path(spec.output_dir)
    deadline = time.monotonic() + 60
    while "started" not in (out / "stdout").read_text():  # the trap is set: cancel now
        assert time.monotonic() < deadline, (out / "stderr").read_text()
        await _sleep()
    await backend.cancel(bid, 20.0)
    status = await wait_end(backend, bid, 30)
    assert status.state == "CANCELLED" and status.cancelled_by_us
    assert (out / "ckpt").read_text() == "step 7\n"  # written inside, before any SIGKILL
    assert status.ended_at is not None and status.ended_at - backend._records[bid].term_at < 20
    assert not _exists(container_name(bid))


async def test_X5_podman_job_ignoring_SIGTERM_is_killed_after_the_grace(world: World) -> None:
    backend = world.backend()
    spec = world.spec("trap '' TERM\necho started\nwhile :; do sleep 0.1; done\n")
    bid = await backend.submit(spec)
    out = Path(spec.output_dir)
    deadline = time.monotonic() + 60
    while "started" not in (out / "stdout").read_text():
        assert time.monotonic() < deadline
        await _sleep()
    await backend.cancel(bid, 1.0)
    status = await wait_end(backend, bid, 30)
    assert status.state == "CANCELLED" and not status.kill_failed
    assert backend._records[bid].killed_at is not None  # it took the SIGKILL
    assert not _exists(container_name(bid))  # the container ended too, not only the client


async def test_O5_restarted_agent_adopts_a_running_container_and_ends_an_orphaned_one(
    world: World,
) -> None:
    first = world.backend()
    spec_a = world.spec("echo started; sleep 600\n")
    spec_b = world.spec("echo started; sleep 600\n")
    bid_a, bid_b = await first.submit(spec_a), await first.submit(spec_b)
    for spec in (spec_a, spec_b):
        deadline = time.monotonic() + 60
        while "started" not in (Path(spec.output_dir) / "stdout").read_text():
            assert time.monotonic() < deadline
            await _sleep()
    await first.close()  # the agent dies; its jobs run on
    world.backends.remove(first)
    # b's wrapper and podman client die too (only its container is left running)
    os.killpg(first._records[bid_b].pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while subprocess.run(["pgrep", "-f", first.store.status_file(bid_b).name]).returncode == 0:
        assert time.monotonic() < deadline
        await _sleep()
    assert _exists(container_name(bid_b))
    second = world.backend()
    assert (await second.poll(bid_a)).state == "RUNNING"  # adopted
    ended_b = await wait_end(second, bid_b, 30)
    assert ended_b.state == "NODE_FAIL"  # lost with the platform, not the job's own failure
    assert not _exists(container_name(bid_b))  # ended, not left holding its GPU
    await second.cancel(bid_a, 1.0)
    assert (await wait_end(second, bid_a, 30)).state == "CANCELLED"
    assert not _exists(container_name(bid_a))


async def test_X4a_agent_refuses_to_start_without_the_runtime_or_its_image(world: World) -> None:
    with pytest.raises(BackendError, match=r"not an executable on PATH.*install-podman"):
        world.backend(podman=Podman(BASE_IMAGE, bin="/nonexistent/podman"))
    with pytest.raises(BackendError, match=r"container_image .* not in podman's image store"):
        world.backend(podman=Podman("localhost/jpu-no-such-image:1"))
    with pytest.raises(BackendError, match="container_runtime"):
        world.backend(container_runtime="docker")
    # what the agent's composition root builds from the configuration: the same refusal
    env = {"JPU_ISOLATION": "container", "JPU_CONTAINER_IMAGE": "localhost/jpu-no-such-image:1"}
    config = load_config(env={**env, "JPU_DATA_DIR": str(world.data_dir)})
    with pytest.raises(BackendError, match="not in podman's image store"):
        make_backend(config, env={})


async def _sleep() -> None:
    await asyncio.sleep(0.05)


async def test_O2_stopping_the_local_stack_ends_the_containers_of_its_jobs(world: World) -> None:
    backend = world.backend()
    spec = world.spec("trap '' TERM\necho started\nwhile :; do sleep 0.1; done\n")
    bid = await backend.submit(spec)
    deadline = time.monotonic() + 60
    while "started" not in (Path(spec.output_dir) / "stdout").read_text():
        assert time.monotonic() < deadline
        await _sleep()
    await backend.close()  # the services stopped first; then the stack ends what is left
    world.backends.remove(backend)
    stopped = await asyncio.to_thread(terminate_all, world.data_dir, 1.0)
    assert stopped == [bid]
    assert not _exists(container_name(bid))  # the SIGKILL reached only the client: removed


async def test_U5_podman_job_runs_in_its_chdir_mounted_read_write(world: World) -> None:
    project = root_dir("jpu-pod-project-")
    alice = pwd.getpwnam("jpu-alice") if os.getuid() == 0 else None
    (project / "hello.txt").write_text("inside\n")
    try:
        if alice is not None:  # the user's own project directory
            for path in (project, project / "hello.txt"):
                os.chown(path, alice.pw_uid, alice.pw_gid)
        backend = world.backend()
        spec = world.spec(
            'cat hello.txt; echo "pwd=$(pwd)"; echo made > made.txt', chdir=str(project)
        )
        status = await wait_end(backend, await backend.submit(spec), 60)
        out = Path(spec.output_dir)
        stdout = (out / "stdout").read_text()
        assert status.state == "COMPLETED", (stdout, (out / "stderr").read_text())
        assert stdout == f"inside\npwd={project}\n"
        assert (project / "made.txt").read_text() == "made\n"  # writable, as the user
    finally:
        shutil.rmtree(project, ignore_errors=True)
