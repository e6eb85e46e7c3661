"""LLM backfill on idle GPUs, end to end (SPEC B1–B5, R2) on the local backend."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import asyncpg
import httpx

from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobDispatched,
    JobEnded,
    JobStarted,
    NodeInventoryObserved,
    ReservationStarted,
    UsageCharged,
)
from jpu.testing.stack import NODE, TIER, Stack, start_stack


def running(s: Stack, job: str) -> bool:
    j = s.state.jobs.get(job)
    return j is not None and j.state == "RUNNING"


async def both_backfilled(s: Stack) -> dict[int, str]:
    await s.until(lambda st: len(st.backfill) == 2)
    return {key[2]: bf for key, bf in s.state.backfill.items()}


async def answers_models(endpoint: str) -> bool:
    async with httpx.AsyncClient(timeout=2.0) as c:
        for _ in range(50):  # the stub may still be binding its port
            try:
                r = await c.get(f"{endpoint}/models")
                return r.status_code == 200 and r.json()["data"][0]["id"] == "jpu-stub-echo"
            except httpx.TransportError:
                await asyncio.sleep(0.05)
    return False


async def test_B1_idle_gpu_gets_backfill_after_settle(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with start_stack(nats_url, pool, pg_dsn) as s:
        await both_backfilled(s)
        inventory = await s.events(NodeInventoryObserved)
        starts = await s.events(BackfillStarted)
        assert sorted(e.gpu for e in starts) == [0, 1] and {e.node for e in starts} == {NODE}
        for e in starts:
            assert e.ts - inventory[0].ts >= s.config.backfill_settle_s  # B1: settled first
            assert e.backend_job_id and e.endpoint
            assert await answers_models(e.endpoint)  # a live OpenAI-compatible endpoint
        r = await s.client.get("/v1/placements", headers={"Authorization": "Bearer demo-bcg-bob"})
        (placement,) = r.json()["placements"]
        assert placement["idle"] == 2  # B4: backfilled GPUs are idle for dispatch
        assert len(starts) == 2 and s.backfill_stats.started == 2  # one instance per GPU
        await s.backfill_rounds()  # nothing more starts while they run
        assert len(await s.events(BackfillStarted)) == 2


async def test_B2_research_dispatch_preempts_backfill_at_once(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with start_stack(nats_url, pool, pg_dsn) as s:
        before = await both_backfilled(s)
        t0 = time.monotonic()
        job = await s.submit("bcg-alice", "sleep 30")
        await s.until(lambda st: running(s, job), timeout=5)
        latency = time.monotonic() - t0
        print(f"B2 submit→RUNNING on a backfilled GPU: {latency * 1000:.0f} ms")
        assert latency < 3.0, latency
        (dispatched,) = await s.events(JobDispatched)
        (gpu,) = dispatched.gpus
        victim = before[gpu]
        await s.until(lambda st: victim not in st.backfill.values(), timeout=5)
        ended = [e for e in await s.events(BackfillEnded) if e.backfill_id == victim]
        assert [e.reason for e in ended] == ["preempted"]
        # the instance was gone before the research job was recorded started (B2, B4)
        (started,) = await s.events(JobStarted)
        record = json.loads(
            (s.data_dir / "local-backend/backfill/jobs" / f"localbf-{victim}.json").read_text()
        )
        assert record["final"]["ended_at"] <= started.ts + 0.05
        start = next(e for e in await s.events(BackfillStarted) if e.backfill_id == victim)
        assert start.endpoint and not await _answers_once(start.endpoint)
        assert s.state.backfill[(NODE, TIER, 1 - gpu)] == before[1 - gpu]  # the other keeps it


async def _answers_once(endpoint: str) -> bool:
    async with httpx.AsyncClient(timeout=1.0) as c:
        try:
            return (await c.get(f"{endpoint}/models")).status_code == 200
        except httpx.TransportError:
            return False


async def test_B3_redeploy_after_research_ends(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with start_stack(nats_url, pool, pg_dsn) as s:
        before = await both_backfilled(s)
        job = await s.submit("bcg-alice", "sleep 1")
        await s.until(lambda st: st.jobs[job].state == "COMPLETED", timeout=10)
        (end,) = await s.events(JobEnded)
        (gpu,) = end.gpus
        await s.until(lambda st: st.backfill.get((NODE, TIER, gpu)) not in (None, before[gpu]))
        again = [e for e in await s.events(BackfillStarted) if e.gpu == gpu]
        assert len(again) == 2 and again[1].backfill_id != before[gpu]
        assert again[1].ts - end.ts >= s.config.backfill_settle_s  # B3: settles again
        assert again[1].endpoint and await answers_models(again[1].endpoint)


async def test_B5_backfill_never_charged(nats_url: str, pool: asyncpg.Pool, pg_dsn: str) -> None:
    async with start_stack(nats_url, pool, pg_dsn) as s:
        before = await both_backfilled(s)
        job = await s.submit("kdg-carol", "sleep 1")
        await s.until(lambda st: st.jobs[job].state == "COMPLETED", timeout=10)
        (end,) = await s.events(JobEnded)
        (gpu,) = end.gpus  # backfill keeps running on the other GPU, and redeploys on this one
        await s.until(lambda st: st.backfill.get((NODE, TIER, gpu)) not in (None, before[gpu]))
        await s.until(lambda st: "KDG" in st.usage)
        charges = await s.events(UsageCharged)
        assert [(c.lab, c.job_id) for c in charges] == [("KDG", job)]  # only research
        assert abs(charges[0].amount - end.usage) < 1e-9
        assert end.gpu_seconds_run < 3.0  # the job's own time; backfill ran far longer
        rows = await pool.fetch("SELECT lab, value FROM lab_usage WHERE value > 0")
        assert [r["lab"] for r in rows] == ["KDG"]
        bf_seconds = sum(time.time() - e.ts for e in await s.events(BackfillStarted))
        assert bf_seconds > 2.0  # there was backfill time to (not) charge


async def test_R2_reserved_gpu_keeps_backfill_but_no_new(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with start_stack(nats_url, pool, pg_dsn) as s:
        before = await both_backfilled(s)
        one = await s.submit("bcg-alice", "sleep 60")
        await s.until(lambda st: running(s, one))
        two = await s.submit("kdg-carol", "sleep 60", num_gpus=2)  # rank 1, 2 GPUs: reserves
        (res,) = [e for e in await _until_events(s, ReservationStarted) if e.job_id == two]
        (gpu,) = res.gpus
        kept = before[gpu]
        await s.backfill_rounds(after_s=s.config.backfill_settle_s)  # past the settle time
        assert s.gpu_state(gpu) == f"reserved:{two}" and s.state.backfill[(NODE, TIER, gpu)] == kept
        assert kept not in {e.backfill_id for e in await s.events(BackfillEnded)}  # R2: kept
        # the instance dies on its own: the reserved GPU gets no new one
        record = json.loads(
            (s.data_dir / "local-backend/backfill/jobs" / f"localbf-{kept}.json").read_text()
        )
        os.killpg(record["pid"], signal.SIGKILL)
        await s.until(lambda st: (NODE, TIER, gpu) not in st.backfill, timeout=5)
        await s.backfill_rounds(after_s=s.config.backfill_settle_s)  # idle and settled
        assert s.gpu_state(gpu) == f"reserved:{two}"
        starts = [e for e in await s.events(BackfillStarted) if e.gpu == gpu]
        assert [e.backfill_id for e in starts] == [kept]  # nothing new on the reserved GPU


async def _until_events(s: Stack, cls: type, timeout: float = 5.0) -> list:
    deadline = time.monotonic() + timeout
    while not (found := await s.events(cls)):
        assert time.monotonic() < deadline, f"no {cls.__name__}"
        await asyncio.sleep(0.05)
    return found
