"""SPEC X4a, X5 through the real Slurm backend on the real test cluster with real podman: the
batch script runs the job in its workspace's container (the node's root helper, through sudo:
jpu.backends.podman_job) as the user's mapped UID, with no network and a read-only root; the
output is read back; a cancel reaches the job inside (its SIGTERM trap checkpoints within the
grace) and the container is gone with the job (Slurm's Epilog). No podman is a failure here."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpu.backends import BackendError
from jpu.backends.isolation import BASE_IMAGE, Podman
from jpu.backends.podman_job import container_of
from jpu.backends.slurm.backend import SlurmBackend
from jpu.backends.workspaces import PipSite, Workspaces
from jpu.testing.slurm_env import SlurmEnv, wait_end, wait_file
from jpu.testing.unavailable import needs_root

SITE = PipSite(ca_bundle="/etc/ssl/certs/ca-certificates.crt")  # the site's index configuration
IMPORT = (
    "python3 -c 'import six; print(\"six\", six.__version__)' 2>/dev/null || echo six=missing\n"
)
PROBE = IMPORT + (
    'echo "att=$JOB_ATTEMPT cvd=$CUDA_VISIBLE_DEVICES out=$JOB_OUTPUT_DIR id=$JPU_JOB_ID"\n'
    'echo "mine=$MY_VAR uid=$(id -u) gid=$(id -g) pwd=$(pwd)"\n'
    "for ip in $ADDRS; do\n"
    '  (exec 3<>"/dev/tcp/$ip/$PORT") 2>/dev/null && echo "connect $ip=ok" '
    '|| echo "connect $ip=failed"\n'
    "done\n"
    "touch /written-by-job 2>/dev/null && echo root=writable || echo root=read-only\n"
)
needs_root("the Slurm test cluster and podman")


def _exists(name: str) -> bool:
    return subprocess.run(["podman", "container", "exists", name], check=False).returncode == 0


def _host_addresses() -> list[str]:
    """This machine's own IPv4 addresses (loopback and its interfaces): the only probe targets."""
    found = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    return ["127.0.0.1", *(a for a in found.stdout.split() if "." in a)]


@pytest.fixture(scope="module")
def workspace_image(podman_helper: None) -> Iterator[str]:
    """A workspace built by the platform's builder (with the network) from `six`."""
    root = Path(tempfile.mkdtemp(prefix="jpu-slurm-ws-"))
    spaces = Workspaces(root, Podman(BASE_IMAGE), SITE)
    name = f"six-{os.getpid()}"
    try:
        assert spaces.start_build("alice", name, "six\n").wait(600) == 0
        ws = spaces.get("alice", name)
        assert ws is not None and ws.state == "READY", spaces.log("alice", name)
        yield ws.image
    finally:
        subprocess.run(["podman", "rmi", "--ignore", "--force", spaces.image_of("alice", name)],
                       capture_output=True, check=False)  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


async def test_X4a_slurm_job_runs_in_its_workspace_container_as_the_user_without_network(
    slurm: SlurmEnv, workspace_image: str
) -> None:
    backend = slurm.new_backend(isolation="container")
    addrs = _host_addresses()
    with socket.create_server(("0.0.0.0", 0)) as server:  # as the gateway's port would be
        port = server.getsockname()[1]
        for ip in addrs:  # the probe's control: from the host every address answers
            socket.create_connection((ip, port), timeout=5).close()
        env = {"MY_VAR": "a,b c", "PORT": str(port), "ADDRS": " ".join(addrs)}
        spec = slurm.spec(PROBE, num_gpus=2, attempt=2, env=env, workspace="six",
                          workspace_image=workspace_image)  # fmt: skip
        bid = await backend.submit(spec)
        status = await wait_end(backend, bid, 60)
    out = Path(spec.output_dir)
    stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
    assert status.state == "COMPLETED", (stdout, stderr)
    assert status.isolation == "container:podman"
    assert "six 1." in stdout  # what the workspace's build installed
    uid = pwd.getpwnam("jpu-alice")  # the user's mapped account, inside the container
    assert f"mine=a,b c uid={uid.pw_uid} gid={uid.pw_gid} pwd={out}" in stdout
    # X2 inside: the platform's variables and the GPUs Slurm allocated
    assert f"att=2 cvd=0,1 out={out} id={spec.job_id}" in stdout
    assert [f"connect {ip}=failed" for ip in addrs] == [
        line for line in stdout.splitlines() if line.startswith("connect ")
    ]
    assert "root=read-only" in stdout
    assert not (out / ".jpu-env").exists()  # the variables' file is read and removed inside
    outside = slurm.spec(IMPORT)  # the base image: the same import fails
    status = await wait_end(backend, await backend.submit(outside), 60)
    assert status.state == "COMPLETED"
    assert (Path(outside.output_dir) / "stdout").read_text() == "six=missing\n"


CHECKPOINT_ON_TERM = (
    "trap 'date +%s.%N > \"$JOB_OUTPUT_DIR/ckpt\"; exit 0' TERM\n"
    'echo ready > "$JOB_OUTPUT_DIR/ready"\n'
    "while :; do sleep 0.1; done\n"
)


async def _started_checkpointing(slurm: SlurmEnv, backend: SlurmBackend) -> tuple[str, Path]:
    """A job whose SIGTERM trap writes the time to OUT/ckpt, once it runs with the trap set."""
    spec = slurm.spec(CHECKPOINT_ON_TERM)
    bid = await backend.submit(spec)
    out = Path(spec.output_dir)
    await wait_file(out / "ready", 60)
    return bid, out


async def _cancel_checkpoints_within_the_grace(backend: SlurmBackend, bid: str, out: Path) -> None:
    asked = time.time()
    await backend.cancel(bid, 10.0)
    status = await wait_end(backend, bid, 60)
    assert status.state == "CANCELLED", (out / "stderr").read_text()
    assert (out / "ckpt").exists(), (out / "stderr").read_text()  # what the helper said
    assert float((out / "ckpt").read_text()) - asked < 10.0  # the checkpoint, within the grace


async def test_X5_slurm_cancel_reaches_the_job_in_its_container_within_the_grace(
    slurm: SlurmEnv, podman_helper: None
) -> None:
    backend = slurm.new_backend(isolation="container")
    bid, out = await _started_checkpointing(slurm, backend)
    assert _exists(container_of(bid))  # running in its container, named after the Slurm job
    await _cancel_checkpoints_within_the_grace(backend, bid, out)
    assert not _exists(container_of(bid))


def _podman_client_of(name: str) -> int:
    """The pid of the `podman run` client of container `name` (the helper's child)."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"run" in argv and name.encode() in argv and b"--name" in argv:
            return int(proc.name)
    raise AssertionError(f"no podman client of {name}")


def _proc_state(pid: int) -> bytes:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return b"X"
    return stat[stat.rindex(b")") + 2 :][:1]


async def test_X5_slurm_cancel_reaches_the_job_after_its_podman_client_died(
    slurm: SlurmEnv, podman_helper: None
) -> None:
    """The client can die before its container: the helper stays until the container ends and
    still passes the cancel in, so the job checkpoints within the grace."""
    backend = slurm.new_backend(isolation="container")
    bid, out = await _started_checkpointing(slurm, backend)
    client = _podman_client_of(container_of(bid))
    os.kill(client, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{client}").exists() and b"Z" not in _proc_state(client):
        assert time.monotonic() < deadline, "the podman client outlived its SIGKILL"
        await asyncio.sleep(0.05)
    assert _exists(container_of(bid))  # the job runs on without its client
    await _cancel_checkpoints_within_the_grace(backend, bid, out)
    deadline = time.monotonic() + 30
    while _exists(container_of(bid)):
        assert time.monotonic() < deadline, "the container outlived its job"
        await asyncio.sleep(0.2)


async def test_X5_slurm_container_ignoring_sigterm_is_removed_with_its_job(
    slurm: SlurmEnv, podman_helper: None
) -> None:
    backend = slurm.new_backend(isolation="container")
    spec = slurm.spec("trap '' TERM\necho ready > \"$JOB_OUTPUT_DIR/ready\"\nsleep 600\n")
    bid = await backend.submit(spec)
    await wait_file(Path(spec.output_dir) / "ready", 60)
    await backend.cancel(bid, 1.0)
    status = await wait_end(backend, bid, 60)
    assert status.state == "CANCELLED"
    deadline = time.monotonic() + 30  # the Epilog removes it as the job ends (a SIGKILL
    while _exists(container_of(bid)):  # after the grace reached only the podman client)
        assert time.monotonic() < deadline, "the container outlived its job"
        time.sleep(0.2)


async def test_X4a_slurm_job_naming_a_workspace_it_cannot_use_is_refused(
    slurm: SlurmEnv, podman_helper: None
) -> None:
    container = slurm.new_backend(isolation="container")
    assert container.builds_workspaces  # the slurm-agent's workspace-builder role
    missing = slurm.spec("true", workspace="nope")
    with pytest.raises(BackendError, match=r"^workspace: 'nope' does not exist for alice$"):
        await container.submit(missing)
    plain = slurm.new_backend(isolation="uid-netns")
    assert not plain.builds_workspaces
    outside = slurm.spec("true", workspace="six", workspace_image=BASE_IMAGE)
    with pytest.raises(BackendError, match=r"^workspace: needs isolation: container"):
        await plain.submit(outside)
    for spec in (missing, outside):  # refused before anything was made or submitted
        assert not Path(spec.output_dir).exists()


async def test_sec6_slurm_container_gets_the_allocations_memory_and_no_user_namespace(
    slurm: SlurmEnv, podman_helper: None
) -> None:
    """SPEC SEC6 on Slurm: sbatch asks for --mem = mem_gb_per_gpu × GPUs; the helper reads the
    allocation back from Slurm (never from the caller) and gives it to the container, whose
    seccomp profile refuses `unshare -Ur`; a chdir in /run is refused by the helper (SEC1)."""
    backend = slurm.new_backend(isolation="container")
    probe = (
        "cat /sys/fs/cgroup/memory.max 2>/dev/null || "
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes\n"
        "unshare -Ur true 2>/dev/null && echo userns=made || echo userns=refused\n"
    )
    spec = slurm.spec(probe)
    status = await wait_end(backend, await backend.submit(spec), 60)
    out = Path(spec.output_dir)
    stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
    assert status.state == "COMPLETED", (stdout, stderr)
    assert stdout.split() == [str(spec.mem_gb * 2**30), "userns=refused"], stdout
    refused = slurm.spec("echo never", chdir="/run")
    status = await wait_end(backend, await backend.submit(refused), 60)
    stderr = (Path(refused.output_dir) / "stderr").read_text()
    assert status.state == "FAILED" and "chdir: /run lies in /run" in stderr, stderr
