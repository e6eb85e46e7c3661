"""The execution backend contract (SPEC X9), written once, run against every backend.

"local" runs jobs as local processes; "slurm" runs them on the real multi-node Slurm test cluster
the session fixture `slurm_cluster` starts (scripts/slurm-testcluster; skipped, with the reason,
only where Slurm cannot be installed or started). Never mocks.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import stat
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.backends import (
    BackendError,
    BackendStatus,
    ExecutionBackend,
    LaunchSpec,
    UnknownBackendJob,
)
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings
from jpu.config import load_config
from jpu.policy.oom import is_gpu_oom
from jpu.testing.slurm_fixtures import SlurmCluster
from jpu.testing.waits import wait_end

BACKENDS = ["local", "slurm"]
NODE, TIER = "gpu-4090x2-01", "rtx4090"


def _root_dir(prefix: str) -> Path:
    """Under /tmp with mode 0711: a job's account must be able to reach its output dir."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)
    return path


def make_backend(
    name: str,
    data_dir: Path,
    kill_failed_after_s: float = 10.0,
    cluster: SlurmCluster | None = None,
) -> ExecutionBackend:
    if name == "slurm":
        assert cluster is not None
        return SlurmBackend(
            SlurmSettings(
                data_dir=data_dir, conf=cluster.conf, timeout_grace_s=1.0,
                kill_failed_after_s=kill_failed_after_s,
            )
        )  # fmt: skip
    assert name == "local"
    settings = LocalSettings(
        data_dir=data_dir,
        nodes=list(load_config().nodes),
        timeout_grace_s=1.0,
        kill_failed_after_s=kill_failed_after_s,
    )
    return LocalBackend(settings)


class Env:
    def __init__(self, name: str, cluster: SlurmCluster | None = None) -> None:
        self.name = name
        self.cluster = cluster
        self.data_dir = _root_dir("jpu-backend-data-")
        self.out_root = _root_dir("jpu-backend-out-")
        self.backend = self.make_backend()
        self._n = 0

    def make_backend(self, kill_failed_after_s: float = 10.0) -> ExecutionBackend:
        return make_backend(self.name, self.data_dir, kill_failed_after_s, self.cluster)

    @property
    def node_names(self) -> set[str]:
        if self.cluster is not None:
            return set(self.cluster.nodes)
        return {n.name for n in load_config().nodes}

    def spec(self, command: str, **kw: object) -> LaunchSpec:
        self._n += 1
        job_id = kw.pop("job_id", f"job{os.getpid()}x{self._n}x{time.monotonic_ns()}")
        attempt = int(kw.pop("attempt", 1))  # type: ignore[call-overload]
        gpus = list(kw.pop("gpus", [1]))  # type: ignore[call-overload]
        return LaunchSpec(
            job_id=str(job_id), attempt=attempt, user=str(kw.pop("user", "alice")),
            node=NODE, tier=TIER, gpus=gpus, num_gpus=len(gpus), command=command,
            output_dir=str(self.out_root / str(job_id) / str(attempt)), **kw,  # type: ignore[arg-type]
        )  # fmt: skip

    async def run(self, spec: LaunchSpec, timeout: float = 20.0) -> BackendStatus:
        bid = await self.backend.submit(spec)
        return await wait_end(self.backend, bid, timeout)


async def wait_file(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        await asyncio.sleep(0.05)


@pytest_asyncio.fixture(params=BACKENDS)
async def env(request: pytest.FixtureRequest) -> AsyncIterator[Env]:
    cluster = request.getfixturevalue("slurm_cluster") if request.param == "slurm" else None
    e = Env(request.param, cluster)
    try:
        yield e
    finally:
        for bid in await e.backend.running():  # leave nothing running behind
            await e.backend.cancel(bid, 0.0)
            await wait_end(e.backend, bid, 10)
        await e.backend.close()
        if cluster is not None:  # a kill_failed test drained a node: give it back
            for node in await e.backend.inventory():
                if node.state == "drain":
                    cluster.scontrol("update", f"nodename={node.node}", "state=resume")
        shutil.rmtree(e.data_dir, ignore_errors=True)
        shutil.rmtree(e.out_root, ignore_errors=True)


async def test_X2_job_sees_platform_environment(env: Env) -> None:
    spec = env.spec(
        'echo "cvd=$CUDA_VISIBLE_DEVICES att=$JOB_ATTEMPT out=$JOB_OUTPUT_DIR id=$JPU_JOB_ID"\n'
        'echo "mine=$MY_VAR"\n',
        gpus=[0, 1], attempt=2, env={"MY_VAR": "hello world", "JOB_ATTEMPT": "99"},
    )  # fmt: skip
    status = await env.run(spec)
    assert status.state == "COMPLETED" and status.exit_code == 0
    out = (Path(spec.output_dir) / "stdout").read_text()
    assert f"cvd=0,1 att=2 out={spec.output_dir} id={spec.job_id}" in out
    assert "mine=hello world" in out  # the user's env, and it cannot override JOB_ATTEMPT
    assert "mine=hello world" in status.output_tail  # the tail the OOM verdict reads (X7)


async def test_X2_output_dir_is_private_to_the_users_account(env: Env) -> None:
    spec = env.spec("id -un > whoami.txt; id -u >> whoami.txt")
    status = await env.run(spec)
    assert status.state == "COMPLETED"
    out = Path(spec.output_dir)
    st = out.stat()
    assert stat.S_IMODE(st.st_mode) == 0o700
    owner, uid = (out / "whoami.txt").read_text().split()
    assert pwd.getpwuid(st.st_uid).pw_name == owner
    if os.getuid() == 0:  # X4: never as root; a mapped unprivileged account
        assert int(uid) != 0 and owner in ("jpu-alice", "nobody")


async def test_X6_exit_code_3_is_failed_with_exit_code(env: Env) -> None:
    status = await env.run(env.spec("echo about to fail; exit 3"))
    assert status.state == "FAILED" and status.exit_code == 3
    assert status.started_at is not None and status.ended_at is not None
    assert status.ended_at >= status.started_at


async def test_X7_cuda_oom_output_is_a_gpu_oom(env: Env) -> None:
    cmd = 'echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2; exit 1'
    status = await env.run(env.spec(cmd))
    assert status.state == "FAILED" and status.exit_code == 1
    assert is_gpu_oom(True, status.output_tail)


async def test_time_limit_ends_job_as_TIMEOUT(env: Env) -> None:
    t0 = time.monotonic()
    status = await env.run(env.spec("sleep 30", time_limit_s=1.0), timeout=15)
    assert status.state == "TIMEOUT"
    assert time.monotonic() - t0 < 8  # limit 1 s + grace 1 s, not the 30 s sleep


async def test_X5_cancel_gives_the_job_its_grace_to_checkpoint(env: Env) -> None:
    spec = env.spec(
        "trap 'echo saved > \"$JOB_OUTPUT_DIR/checkpoint\"; exit 0' TERM\n"
        "touch ready\n"
        "sleep 60 & wait\n"
    )
    bid = await env.backend.submit(spec)
    await wait_file(Path(spec.output_dir) / "ready")
    await env.backend.cancel(bid, 2.0)
    status = await wait_end(env.backend, bid, 10)
    assert status.state == "CANCELLED" and status.cancelled_by_us
    assert (Path(spec.output_dir) / "checkpoint").read_text() == "saved\n"
    assert status.signal is None  # it exited on its own after SIGTERM, no SIGKILL needed


async def test_X5_job_ignoring_SIGTERM_is_killed_after_the_grace(env: Env) -> None:
    spec = env.spec("trap '' TERM\ntouch ready\nwhile true; do sleep 0.2; done\n")
    bid = await env.backend.submit(spec)
    await wait_file(Path(spec.output_dir) / "ready")
    t0 = time.monotonic()
    await env.backend.cancel(bid, 1.0)
    status = await wait_end(env.backend, bid, 10)
    elapsed = time.monotonic() - t0
    assert status.state == "CANCELLED" and not status.kill_failed
    assert 0.9 <= elapsed < 5, elapsed
    assert status.exit_code is None  # the group died by SIGKILL: no exit status was written


async def test_X3_command_text_is_never_interpolated(env: Env) -> None:
    marker = env.out_root / "pwned"
    command = (
        f'echo \'single $(touch {marker}) `id`\' "double \\"q\\""\n'
        "printf '%s\\n' \"$0\" > argv0.txt\n"
    )
    spec = env.spec(command)
    status = await env.run(spec)
    assert status.state == "COMPLETED"
    assert not marker.exists()
    assert (Path(spec.output_dir) / "job.sh").read_text() == command
    assert f'single $(touch {marker}) `id` double "q"' in status.output_tail


async def test_X4_isolation_is_recorded_and_enforced(env: Env) -> None:
    spec = env.spec("cat /proc/net/dev > netdev.txt; id -u > uid.txt")
    bid = await env.backend.submit(spec)
    status = await wait_end(env.backend, bid)
    assert status.isolation in ("uid+netns", "none")
    ifaces = [
        line.split(":")[0].strip()
        for line in (Path(spec.output_dir) / "netdev.txt").read_text().splitlines()
        if ":" in line
    ]
    if status.isolation == "uid+netns":
        assert ifaces == ["lo"]  # no network: only a loopback, and it is down
    if os.getuid() == 0:
        assert (Path(spec.output_dir) / "uid.txt").read_text().strip() != "0"


async def test_submit_is_idempotent_per_attempt(env: Env) -> None:
    spec = env.spec("echo run >> runs.txt; sleep 0.5")
    first = await env.backend.submit(spec)
    again = await env.backend.submit(spec)
    assert first == again
    assert await env.backend.find(spec.job_id, 1) == first
    assert await env.backend.find(spec.job_id, 2) is None
    await wait_end(env.backend, first)
    assert (Path(spec.output_dir) / "runs.txt").read_text() == "run\n"


async def test_O5_a_new_backend_instance_readopts_running_jobs(env: Env) -> None:
    spec = env.spec("touch ready; sleep 1.5; exit 4")
    bid = await env.backend.submit(spec)
    await wait_file(Path(spec.output_dir) / "ready")
    await env.backend.close()  # the agent goes away; the job does not
    env.backend = env.make_backend()
    assert bid in await env.backend.running()
    status = await wait_end(env.backend, bid)
    assert status.state == "FAILED" and status.exit_code == 4  # exit code survived the restart
    assert status.ended_at is not None and status.started_at is not None
    elapsed = status.ended_at - status.started_at
    assert elapsed >= 1.3 and elapsed < 5


async def test_inventory_lists_the_configured_nodes(env: Env) -> None:
    inventory = {n.node: n for n in await env.backend.inventory()}
    assert inventory[NODE].gpus == {TIER: 2} and inventory[NODE].state == "up"
    assert set(inventory) == env.node_names


async def test_unknown_backend_job_is_an_error(env: Env) -> None:
    with pytest.raises(UnknownBackendJob):
        await env.backend.poll("no-such-job")


async def test_X5_a_job_outliving_the_kill_is_kill_failed_and_drains_its_node(env: Env) -> None:
    """kill_failed_after_s=0: the job is recorded the moment SIGKILL is sent, before its death
    could be observed — the path a job stuck in the kernel (D state) takes after 5 minutes."""
    env.backend = env.make_backend(kill_failed_after_s=0.0)
    spec = env.spec("trap '' TERM\ntouch ready\nwhile true; do sleep 0.2; done\n")
    bid = await env.backend.submit(spec)
    await wait_file(Path(spec.output_dir) / "ready")
    await env.backend.cancel(bid, 0.5)
    status = await wait_end(env.backend, bid, 10)
    assert status.state == "CANCELLED" and status.kill_failed
    node = {n.node: n for n in await env.backend.inventory()}[NODE]
    assert node.state == "drain" and node.reason and bid in node.reason


async def test_X2_a_planted_symlink_is_never_followed_by_the_root_agent(env: Env) -> None:
    """The user owns <root>/<job_id>/: a symlink planted as a later attempt's directory (or as
    its stdout) must not make the agent chown or truncate what it points to."""
    first = env.spec("true", attempt=1)
    assert (await env.run(first)).state == "COMPLETED"
    victim = _root_dir("jpu-victim-")
    (victim / "precious").write_text("keep me\n")
    attempt2 = Path(first.output_dir).parent / "2"
    attempt2.symlink_to(victim, target_is_directory=True)
    second = env.spec("true", job_id=first.job_id, attempt=2)
    with pytest.raises(BackendError):
        await env.backend.submit(second)
    assert victim.stat().st_uid == os.getuid() and (victim / "precious").read_text() == "keep me\n"
    attempt2.unlink()
    attempt2.mkdir()
    (attempt2 / "stdout").symlink_to(victim / "precious")
    assert (await env.run(second)).state == "COMPLETED"
    assert (victim / "precious").read_text() == "keep me\n"
    assert not (attempt2 / "stdout").is_symlink()
    shutil.rmtree(victim)
