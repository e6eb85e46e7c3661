"""SPEC SEC6 live, with the real OCI engine: a job in its container gets what its tier
promises and no more — memory mem_gb_per_gpu × GPUs and CPUs as cgroup limits, bounded pids and
/tmp — and cannot make a user namespace of its own (`unshare -Ur`: the seccomp profile,
jpu.backends.seccomp). The argv: tests/unit/test_isolation.py."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from jpu.backends.isolation import PIDS_LIMIT
from jpu.testing.local_world import LocalWorld
from jpu.testing.unavailable import needs_root
from jpu.testing.waits import wait_end

needs_root("rootful podman: the agent is root")
PROBE = r"""
mem=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)
pids=$(cat /sys/fs/cgroup/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids/pids.max)
echo "mem=$mem pids=$pids"
echo "tmp_kb=$(df -k --output=size /tmp | tail -1 | tr -d ' ')"
unshare -Ur true 2>/dev/null && echo "userns=made" || echo "userns=refused"
unshare --user --mount true 2>/dev/null && echo "userns2=made" || echo "userns2=refused"
echo "fork=$(bash -c 'echo ok')"
"""


@pytest_asyncio.fixture
async def world() -> AsyncIterator[LocalWorld]:
    assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    w = LocalWorld("jpu-sec6", isolation="container")
    try:
        yield w
    finally:
        await w.aclose()


async def test_sec6_a_job_gets_its_tiers_memory_bounded_pids_and_tmp_and_no_user_namespace(
    world: LocalWorld,
) -> None:
    backend = world.backend()
    spec = world.spec(PROBE, gpus=[0, 1], mem_gb=2, cpus=2)  # 2 GPUs × 1 GB, × 1 CPU
    status = await wait_end(backend, await backend.submit(spec), 90)
    out = Path(spec.output_dir)
    stdout = (out / "stdout").read_text()
    assert status.state == "COMPLETED", (stdout, (out / "stderr").read_text())
    seen = dict(w.split("=", 1) for line in stdout.split("\n") for w in line.split() if "=" in w)
    assert seen["mem"] == str(2 * 2**30), stdout  # mem_gb × GiB, enforced by the cgroup
    assert seen["pids"] == str(PIDS_LIMIT), stdout
    assert 0 < int(seen["tmp_kb"]) <= 2 * 2**20, stdout  # a tmpfs no larger than the memory
    assert (seen["userns"], seen["userns2"]) == ("refused", "refused"), stdout
    assert seen["fork"] == "ok", stdout  # ordinary clone still works (only NEWUSER is refused)
