"""SPEC X5 on real Slurm: a job Slurm still reports `kill_failed_after_s` after its SIGKILL is
recorded CANCELLED with kill_failed, and its node drained with that reason (P2: no new job there).

A hung node is made for real: the node's slurmd is stopped (SIGSTOP), so slurmctld can deliver
neither the TERM nor the KILL and keeps the job; it is continued afterwards and the node resumed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from jpu.backends.slurm.backend import SlurmBackend
from jpu.testing.slurm_env import SlurmEnv, wait_end

NODE = "gpu-4090x2-02"  # not the node of the session's time-limit job (gpu-3080tix2-01)
STUCK = "trap '' TERM; while true; do sleep 0.2; done"


async def test_X5_kill_failed_on_a_hung_node_is_recorded_and_the_node_drained(
    slurm: SlurmEnv,
) -> None:
    backend = slurm.new_backend(kill_failed_after_s=3.0)
    bid = await backend.submit(slurm.spec(STUCK, node=NODE))
    deadline = time.monotonic() + 20
    while (await backend.poll(bid)).state != "RUNNING":
        assert time.monotonic() < deadline, "the job never started"
        await asyncio.sleep(0.2)
    slurmd = int(Path(slurm.cluster.directory / "run" / f"slurmd-{NODE}.pid").read_text())
    os.kill(slurmd, signal.SIGSTOP)  # the node hangs: no signal reaches the job any more
    try:
        t0 = time.monotonic()
        await backend.cancel(bid, 1.0)  # TERM now, KILL after 1 s, kill_failed 3 s after that
        status = await wait_end(backend, bid, timeout=20)
        assert status.state == "CANCELLED" and status.kill_failed, status
        assert status.reason is not None and status.reason.startswith("kill_failed")
        assert 4.0 <= time.monotonic() - t0 < 15
        (node,) = [n for n in await backend.inventory() if n.node == NODE]
        assert node.state == "drain" and (node.reason or "").startswith("kill_failed"), node
        assert node.down == {"rtx4090": [0, 1]}  # P2: its GPUs are no capacity
    finally:
        os.kill(slurmd, signal.SIGCONT)
        await _until_up(slurm, backend, bid)


async def _until_up(slurm: SlurmEnv, backend: SlurmBackend, bid: str) -> None:
    """Continued, slurmd delivers the kill and the job ends; resumed, the node is whole again
    for the next test (it may answer as not responding for a moment after the stop)."""
    deadline = time.monotonic() + 60
    while "JobState=COMPLETING" in slurm.cluster.scontrol("-o", "show", "job", bid):
        assert time.monotonic() < deadline, "the job never ended after SIGCONT"
        await asyncio.sleep(0.5)
    slurm.cluster.scontrol("update", f"nodename={NODE}", "state=resume")
    while True:
        (node,) = [n for n in await backend.inventory() if n.node == NODE]
        if node.state == "up":
            return
        assert time.monotonic() < deadline, node
        await asyncio.sleep(0.5)
