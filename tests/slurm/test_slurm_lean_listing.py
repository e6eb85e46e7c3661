"""The lean squeue listing the backend polls through says what `squeue --json` says (SPEC X6, X9):
the same states, exit statuses, nodes and times for the same jobs on the real cluster, and the
same BackendStatus through either listing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from jpu.backends import BackendError
from jpu.backends.slurm.cli import SlurmCli
from jpu.backends.slurm.parse import jobs_from_squeue
from jpu.backends.slurm.submit import NAME_PREFIX
from jpu.testing.slurm_env import SlurmEnv, unreachable_conf, wait_end, wait_file

FIELDS = ("state", "reason", "user", "node", "partition", "start_time", "submit_time")


async def test_X9_lean_listing_matches_squeue_json(slurm: SlurmEnv) -> None:
    lean = slurm.new_backend()
    old = slurm.new_backend(listing="json")
    failed = await lean.submit(slurm.spec("exit 3"))
    killed = await lean.submit(slurm.spec("kill -9 $$"))
    spec = slurm.spec("touch ready; sleep 60")
    running = await lean.submit(spec)
    await wait_end(lean, failed)
    await wait_end(lean, killed)
    await wait_file(Path(spec.output_dir) / "ready")
    texts = await lean.cli.squeue_states()
    full = jobs_from_squeue(await lean.cli.squeue(), NAME_PREFIX)
    for bid in (failed, killed, running):
        a, b = texts[int(bid)], full[int(bid)]
        assert [getattr(a, f) for f in FIELDS] == [getattr(b, f) for f in FIELDS], bid
        assert a.exit_status == b.exit_status and a.terminal == b.terminal
        if a.terminal:
            assert a.end_time == b.end_time
    assert texts[int(failed)].exit_status == 3 << 8
    lean.lean.invalidate()  # a poll may use a listing up to its max age old (from the waits
    old.full.invalidate()  # above, when `running` was still pending): compare fresh ones
    for bid in (failed, killed, running):  # the contract's view, through either listing
        x, y = await lean.poll(bid), await old.poll(bid)
        assert x.state == y.state and x.exit_code == y.exit_code and x.signal == y.signal, bid
        assert (x.started_at, x.node, x.isolation) == (y.started_at, y.node, y.isolation)
        assert x.output_tail == y.output_tail
    await lean.cancel(running, 0.0)
    assert (await wait_end(lean, running)).state == "CANCELLED"


async def test_X9_find_by_name_through_the_lean_listing(slurm: SlurmEnv) -> None:
    """`find` asks squeue for exactly one name; an attempt another agent submitted is adopted
    from the full listing (name, comment, output dir)."""
    first = slurm.new_backend()
    spec = slurm.spec("sleep 30")
    bid = await first.submit(spec)
    other = slurm.new_backend(data_dir=slurm.out_root / "other-agent")
    assert await other.find(spec.job_id, 1) == bid
    assert await other.find(spec.job_id, 2) is None
    assert await other.running() == [bid]
    assert (await other.poll(bid)).state in ("PENDING", "RUNNING")
    await other.cancel(bid, 0.0)
    assert (await wait_end(other, bid)).state == "CANCELLED"


async def test_X9_lean_listing_slurmctld_unreachable_is_an_error(
    slurm: SlurmEnv, tmp_path: Path
) -> None:
    """A text squeue exits non-zero when slurmctld does not answer: never an empty queue."""
    wrong = unreachable_conf(slurm, tmp_path)
    with pytest.raises(BackendError):
        await asyncio.wait_for(SlurmCli(str(wrong)).squeue_states(), 60)
