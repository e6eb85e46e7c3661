"""SPEC O5, X6, R2 — found by the crash-safety run (tests/e2e/test_crash_safety.py): a
slurm-agent SIGKILLed after the local backend spawned an attempt but before it saved the pid.

The backend saves the attempt's record before the spawn and again, with the pid, after it (an
fsync in a thread: on a loaded machine the window is hundreds of ms). A restart in between found
`pid == 0` and reported the attempt NODE_FAIL "never started" — while the job, in its own
session, kept running on its GPUs: the job was recorded FAILED though it ran to exit 0, its run
was not charged, and the dispatcher gave its GPU to another job while it still ran there.

A restarted backend must adopt such an attempt (the wrapper is found by its status file, which
is on its command line), or read its exit status when it already ended; when nothing was
spawned, the attempt is not found, so the agent launches it (it ran 0 times). Real processes,
no mocks: the disk state of the crash is made by undoing the second save.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from jpu.backends import LaunchSpec
from jpu.backends.backfill_contract import BackfillSpec
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.backends.local.watch import adopt_unsaved_spawn
from jpu.config import load_config
from jpu.testing.waits import wait_end


def _root_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)  # the job's account must reach its output dir
    return path


class Dirs:
    def __init__(self) -> None:
        self.data, self.out = _root_dir("jpu-spawn-data-"), _root_dir("jpu-spawn-out-")
        self.n = 0

    def backend(self) -> LocalBackend:
        return LocalBackend(LocalSettings(data_dir=self.data, nodes=list(load_config().nodes)))

    def spec(self, command: str) -> LaunchSpec:
        self.n += 1
        job_id = f"spawncrash{self.n}x{time.monotonic_ns()}"
        return LaunchSpec(
            job_id=job_id, attempt=1, user="alice", node="gpu-4090x2-01", tier="rtx4090",
            gpus=[0], num_gpus=1, command=command, output_dir=str(self.out / job_id / "1"),
        )  # fmt: skip


@pytest_asyncio.fixture
async def dirs() -> AsyncIterator[Dirs]:
    d = Dirs()
    try:
        yield d
    finally:
        backend = d.backend()  # whatever is left running: cancel it
        for bid in await backend.running():
            await backend.cancel(bid, 0.0)
            await wait_end(backend, bid, 10)
        await backend.close()
        shutil.rmtree(d.data, ignore_errors=True)
        shutil.rmtree(d.out, ignore_errors=True)


def crash_after_spawn(backend: LocalBackend, bid: str) -> None:
    """What the disk holds when the agent died after the spawn, before the second save."""
    record = backend.store.load(bid)
    assert record is not None and record.pid > 0
    record.pid, record.ticks, record.started_at = 0, 0, 0.0
    backend.store.save(record)


async def test_O5_spawned_attempt_whose_pid_was_not_saved_is_adopted_while_it_runs(
    dirs: Dirs,
) -> None:
    crashed = dirs.backend()
    t0 = time.time()
    bid = await crashed.submit(dirs.spec("sleep 2\necho done\n"))
    await crashed.close()  # the agent is gone; the job runs on in its own session
    crash_after_spawn(crashed, bid)

    restarted = dirs.backend()
    status = await restarted.poll(bid)
    assert status.state == "RUNNING", status  # before the fix: NODE_FAIL "never started"
    assert status.started_at is not None and abs(status.started_at - t0) < 1.0, status
    final = await wait_end(restarted, bid, 20)
    assert (final.state, final.exit_code) == ("COMPLETED", 0), final
    assert final.started_at is not None and final.ended_at is not None
    assert final.ended_at - final.started_at >= 1.9, final  # its run is charged (F5)


async def test_O5_spawned_attempt_that_ended_while_no_agent_watched_keeps_its_exit_status(
    dirs: Dirs,
) -> None:
    crashed = dirs.backend()
    bid = await crashed.submit(dirs.spec("sleep 1\nexit 3\n"))
    await crashed.close()
    status_file = crashed.store.status_file(bid)
    deadline = time.monotonic() + 10
    while not status_file.exists():  # the wrapper records the exit status itself
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.05)
    crash_after_spawn(crashed, bid)

    final = await wait_end(dirs.backend(), bid, 10)
    assert (final.state, final.exit_code) == ("FAILED", 3), final  # not NODE_FAIL
    assert final.reason != "never started", final
    # F5: its second of work is run time (it was all booked as startup before the wrapper
    # recorded when the job began)
    assert final.started_at is not None and final.ended_at is not None, final
    assert final.ended_at - final.started_at >= 0.9, final


def crash_before_spawn(backend: LocalBackend, spec: LaunchSpec) -> str:
    """What the disk holds when the agent died after saving the record, before the spawn
    (found by the crash-safety run, seed 364713: the attempt was recorded started and FAILED
    "never started", and the job never ran): the record (pid 0) and the prepared output dir."""
    bid = f"local-{spec.job_id}-{spec.attempt}"
    record, fds = backend._prepare(spec, bid)
    for fd in fds:
        os.close(fd)
    backend.store.save(record)
    return bid


async def test_O5_attempt_never_spawned_is_launched_by_the_next_agent(dirs: Dirs) -> None:
    """Nothing of the job ran: the next agent does not find it (so its submit launches it)
    and the relaunch runs the job once, to its end."""
    spec = dirs.spec('echo "$$" >> "$JOB_OUTPUT_DIR/launches"\n')
    bid = crash_before_spawn(dirs.backend(), spec)

    restarted = LocalBackend(LocalSettings(data_dir=dirs.data, nodes=list(load_config().nodes)))
    assert await restarted.find(spec.job_id, spec.attempt) is None  # before: found, NODE_FAIL
    assert await restarted.submit(spec) == bid
    final = await wait_end(restarted, bid, 20)
    assert (final.state, final.exit_code) == ("COMPLETED", 0), final
    launches = (Path(spec.output_dir) / "launches").read_text().split()
    assert len(launches) == 1, launches  # once (O5)


async def test_O5_a_fresh_unspawned_record_waits_out_the_fork_window(dirs: Dirs) -> None:
    """A record saved moments ago may belong to a child still between its fork and its exec
    (not yet findable by its argv): it is declared never spawned only `SPAWN_GRACE_S` after
    the save, and a wrapper that shows up meanwhile is adopted — never launched twice."""
    spec = dirs.spec("sleep 1\n")
    backend = dirs.backend()
    bid = crash_before_spawn(backend, spec)
    record = backend.store.load(bid)
    assert record is not None
    t0 = time.monotonic()
    assert adopt_unsaved_spawn(record, backend.store, grace_s=0.6) == "never spawned"
    assert time.monotonic() - t0 >= 0.5  # it waited for the window since the save
    # a late exec: the wrapper appears during the wait and is adopted
    fds = _output_fds(spec)
    proc = await backend._spawn(record, spec, fds)
    for fd in fds:
        os.close(fd)
    assert adopt_unsaved_spawn(record, backend.store, grace_s=5.0) == "adopted"
    assert record.pid == proc.pid
    await proc.wait()


def _output_fds(spec: LaunchSpec) -> tuple[int, int]:
    out = Path(spec.output_dir)
    flags = os.O_WRONLY | os.O_APPEND
    return os.open(out / "stdout", flags), os.open(out / "stderr", flags)


async def test_B2_backfill_instance_whose_pid_was_not_saved_is_adopted_and_preemptible(
    dirs: Dirs,
) -> None:
    """The same window in the local backfill: an instance recorded as ended while it still
    served on its GPU would never be preempted (B2), and a research job would share the GPU."""
    crashed = dirs.backend()
    spec = BackfillSpec(
        backfill_id=f"bfcrash{time.monotonic_ns()}", node="gpu-4090x2-01", tier="rtx4090",
        gpu=1, command="sleep 60\n",
    )  # fmt: skip
    bid = (await crashed.submit_backfill(spec)).backend_job_id
    await crashed.close_backfill()  # the backfill service is gone; the instance runs on
    await crashed.close()
    record = crashed._instances().store.load(bid)
    assert record is not None and record.pid > 0
    pid = record.pid
    record.pid, record.ticks, record.started_at = 0, 0, 0.0
    crashed._instances().store.save(record)

    restarted = dirs.backend()
    status = await restarted.poll_backfill(bid)
    assert status.state == "RUNNING", status
    assert bid in await restarted.running_backfill()
    stopped = await restarted.preempt_backfill("gpu-4090x2-01", "rtx4090", [1], 0.5)
    assert stopped == [bid]  # before the fix: [] (recorded ended; it served on, unpreempted)
    deadline = time.monotonic() + 10
    while (await restarted.poll_backfill(bid)).state == "RUNNING":
        assert time.monotonic() < deadline, "the adopted instance was not stopped"
        await asyncio.sleep(0.05)
    assert (
        not Path(f"/proc/{pid}").exists()
        or b"sleep" not in Path(f"/proc/{pid}/cmdline").read_bytes()
    )
    await restarted.close_backfill()


async def test_X6_local_backend_calls_back_once_an_attempts_end_is_saved(dirs: Dirs) -> None:
    """NotifiesEnds: the agent polls an ended attempt at once, not at its backoff; the call
    comes after the final status is saved, so that poll finds it."""
    backend = dirs.backend()
    ended: asyncio.Queue[str] = asyncio.Queue()
    backend.notify_ends(ended.put_nowait)
    bid = await backend.submit(dirs.spec("exit 0\n"))
    assert await asyncio.wait_for(ended.get(), 20) == bid
    saved = backend.store.load(bid)
    assert saved is not None and saved.final is not None and saved.final.state == "COMPLETED"
    await backend.close()
