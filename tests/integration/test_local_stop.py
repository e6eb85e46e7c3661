"""`terminate_all` (SPEC O2): when the local stack stops, the local backend's jobs and backfill
instances stop too — while a mere backend restart still leaves them running to be re-adopted."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jpu.backends import LaunchSpec
from jpu.backends.backfill_contract import BackfillSpec
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.backends.local.stop import STOP_REASON, terminate_all
from jpu.config import load_config

NODE, TIER = "gpu-4090x2-01", "rtx4090"


@pytest.fixture
def data_dir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="jpu-local-stop-", dir="/tmp"))
    d.chmod(0o711)  # the job's account must reach its output dir
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _backend(data_dir: Path) -> LocalBackend:
    return LocalBackend(LocalSettings(data_dir=data_dir, nodes=list(load_config().nodes)))


def _group(pgid: int) -> set[int]:
    """Live (non-zombie) processes of a process group."""
    pids = set()
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.add(int(p))
    return pids


async def _wait_group(pgid: int, size: int) -> None:
    deadline = time.monotonic() + 10
    while len(_group(pgid)) < size:
        assert time.monotonic() < deadline, f"group {pgid} never reached {size} processes"
        await asyncio.sleep(0.05)


async def test_O2_terminate_all_stops_jobs_and_backfill_left_by_a_stopped_backend(
    data_dir: Path,
) -> None:
    backend = _backend(data_dir)
    # the job's own child must go too; the backfill instance ignores SIGTERM (SIGKILL after grace)
    job = await backend.submit(
        LaunchSpec(
            job_id="long", attempt=1, user="alice", node=NODE, tier=TIER, gpus=[0], num_gpus=1,
            command="sleep 600 &\nsleep 600\nwait\n", output_dir=str(data_dir / "out" / "long"),
        )
    )  # fmt: skip
    bf = await backend.submit_backfill(
        BackfillSpec(
            backfill_id="bf-stop", node=NODE, tier=TIER, gpu=1,
            command="trap '' TERM\nsleep 600 &\nwait\n",
        )
    )  # fmt: skip
    job_rec = backend.store.load(job)
    bf_rec = backend._instances().store.load(bf.backend_job_id)
    assert job_rec is not None and bf_rec is not None
    await _wait_group(job_rec.pid, 3)  # wrapper, bash script, two sleeps (≥ 3 once forked)
    await _wait_group(bf_rec.pid, 3)
    await backend.close()  # an agent stop: its watchers stopped (awaited), the jobs keep running
    adopter = _backend(data_dir)  # what a restarted agent reads: neither has ended (no sleep)
    try:
        assert await adopter.running() == [job]
        assert await adopter.running_backfill() == [bf.backend_job_id]
    finally:
        await adopter.close()
    assert _group(job_rec.pid) and _group(bf_rec.pid)

    t0 = time.monotonic()
    stopped = await asyncio.to_thread(terminate_all, data_dir, 1.0)
    assert sorted(stopped) == sorted([job, bf.backend_job_id])
    assert time.monotonic() - t0 < 6  # SIGTERM, 1 s grace, SIGKILL — no waiting on sleeps
    assert not _group(job_rec.pid) and not _group(bf_rec.pid)

    # a later start of the stack reports them as lost with the stack, never re-adopts them
    again = _backend(data_dir)
    try:
        assert await again.running() == [] and await again.running_backfill() == []
        for status in (await again.poll(job), await again.poll_backfill(bf.backend_job_id)):
            assert (status.state, status.reason) == ("NODE_FAIL", STOP_REASON)
    finally:
        await again.close()
    assert terminate_all(data_dir, 1.0) == []  # nothing left: a second stop is a no-op


def test_O2_terminate_all_on_an_unused_data_dir_does_nothing(data_dir: Path) -> None:
    assert terminate_all(data_dir, 1.0) == []
    assert not (data_dir / "local-backend").exists()  # it creates nothing
