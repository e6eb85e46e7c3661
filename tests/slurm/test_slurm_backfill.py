"""LLM backfill on the real Slurm test cluster (SPEC B1, B2): instances are batch jobs in the
preemptible `llm` partition, and a research job onto their GPU runs within seconds."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest_asyncio

from jpu.backends import UnknownBackendJob
from jpu.backends.backfill_contract import BackfillBackend, BackfillSpec
from jpu.backends.slurm.backend import SlurmBackend
from jpu.testing.slurm_env import SlurmEnv, wait_end

STUB = "python -m jpu.tools.backfill_stub"


def squeue(env: SlurmEnv) -> dict[str, dict]:  # type: ignore[type-arg]
    done = subprocess.run(
        ["squeue", "--json"], env={**os.environ, "SLURM_CONF": env.cluster.conf},
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return {str(j["job_id"]): j for j in json.loads(done.stdout)["jobs"]}


def bf_spec(node: str, tier: str, gpu: int) -> BackfillSpec:
    bf = f"bf-t{os.getpid()}x{time.monotonic_ns()}"
    return BackfillSpec(backfill_id=bf, node=node, tier=tier, gpu=gpu, command=STUB)


@pytest_asyncio.fixture
async def backend(slurm: SlurmEnv) -> AsyncIterator[SlurmBackend]:
    b = slurm.new_backend()
    try:
        yield b
    finally:  # leave no instance behind for the next test
        for bid in await b.running_backfill():
            with contextlib.suppress(UnknownBackendJob):
                await b.cancel_backfill(bid, 0.0)
        for bid in await b.running_backfill():
            await _wait_bf_end(b, bid)


async def _wait_bf_end(b: SlurmBackend, bid: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await b.poll_backfill(bid)
        if status.terminal:
            return status.state
        await asyncio.sleep(0.1)
    raise AssertionError(f"backfill {bid} did not end within {timeout}s")


async def test_B1_backfill_on_slurm_runs_in_llm_partition(
    slurm: SlurmEnv, backend: SlurmBackend
) -> None:
    assert isinstance(backend, BackfillBackend)
    spec = bf_spec("gpu-3080tix2-01", "rtx3080ti", 1)
    handle = await backend.submit_backfill(spec)
    assert handle.endpoint is not None
    async with httpx.AsyncClient(timeout=5) as client:
        r = await client.get(f"{handle.endpoint}/models")
    assert r.status_code == 200 and r.json()["data"][0]["id"] == "jpu-stub-echo"
    job = squeue(slurm)[handle.backend_job_id]
    assert job["partition"] == "llm" and job["nodes"] == "gpu-3080tix2-01"
    assert job["tres_per_node"] == "gres:gpu:rtx3080ti:1" and job["requeue"] is False
    assert job["name"] == f"jpubf-{spec.backfill_id}"
    # idempotent per backfill id; never an attempt (the agent must not sweep it as an orphan)
    again = await backend.submit_backfill(spec)
    assert again.backend_job_id == handle.backend_job_id
    assert handle.backend_job_id in await backend.running_backfill()
    assert handle.backend_job_id not in await backend.running()
    assert (await backend.poll_backfill(handle.backend_job_id)).state == "RUNNING"
    await backend.cancel_backfill(handle.backend_job_id, 1.0)
    assert await _wait_bf_end(backend, handle.backend_job_id) == "CANCELLED"
    assert handle.backend_job_id not in await backend.running_backfill()
    # the ended job is still listed (MinJobAge), but the same id again (a new log's ids repeat)
    # is a new instance, not the ended one adopted
    assert handle.backend_job_id in squeue(slurm)
    fresh = await backend.submit_backfill(spec)
    assert fresh.backend_job_id != handle.backend_job_id
    assert (await backend.poll_backfill(fresh.backend_job_id)).state == "RUNNING"


async def test_B2_research_onto_backfilled_gpu_on_slurm_preempts_within_3s(
    slurm: SlurmEnv, backend: SlurmBackend
) -> None:
    node, tier = "gpu-4090x2-02", "rtx4090"
    handles = [await backend.submit_backfill(bf_spec(node, tier, g)) for g in (0, 1)]
    for h in handles:
        assert (await backend.poll_backfill(h.backend_job_id)).state == "RUNNING"
    spec = slurm.spec("echo cvd=$CUDA_VISIBLE_DEVICES; sleep 1", node=node)
    t0 = time.monotonic()
    # what the slurm-agent does for a dispatch onto a backfilled GPU (B2), then the submit
    preempted = await backend.preempt_backfill(node, tier, [0], 2.0)
    bid = await backend.submit(spec)
    while (await backend.poll(bid)).state == "PENDING":
        assert time.monotonic() - t0 < 3.0, "research job not RUNNING within 3 s"
        await asyncio.sleep(0.05)
    took = time.monotonic() - t0
    assert took < 3.0, took
    assert preempted == [handles[0].backend_job_id]
    assert (await backend.poll_backfill(handles[0].backend_job_id)).terminal
    assert (await backend.poll_backfill(handles[1].backend_job_id)).state == "RUNNING"
    status = await wait_end(backend, bid)
    assert status.state == "COMPLETED" and "cvd=" in status.output_tail


async def test_B2_the_preemption_checks_of_a_start_burst_share_fresh_listings(
    backend: SlurmBackend,
) -> None:
    """The agent checks for backfill before each start (B2); a burst's checks share squeues
    (each begun after its call) and still leave an instance on another GPU alone."""
    node, tier = "gpu-4090x2-02", "rtx4090"
    other = await backend.submit_backfill(bf_spec(node, tier, 1))
    run, squeues = backend.cli.run, [0]

    async def counting(argv: Sequence[str], **kw: Any) -> tuple[int, str, str]:
        squeues[0] += argv[0] == "squeue"
        return await run(argv, **kw)

    backend.cli.run = counting  # type: ignore[method-assign]
    checks = await asyncio.gather(
        *(backend.preempt_backfill(node, tier, [0], 2.0) for _ in range(8))
    )
    assert checks == [[]] * 8  # nothing on GPU 0
    assert squeues[0] <= 2, squeues  # the first alone, the seven that asked meanwhile together
    assert (await backend.poll_backfill(other.backend_job_id)).state == "RUNNING"
