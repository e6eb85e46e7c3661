"""The full maintenance cycle on the running services (SPEC M1–M5, Q3, D6, R5, B1/M2)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import asyncpg

from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobDispatched,
    MaintenanceChanged,
    ReservationReleased,
    ReservationStarted,
    UsageCharged,
    new_event_id,
)
from jpu.testing.api import bearer
from jpu.testing.stack import NODE, TIER, Stack, start_stack
from jpu.testing.stack_process import world_searchable_tmpdir


async def status(s: Stack) -> dict:
    r = await s.client.get("/v1/maintenance/status")  # anonymous (M5)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def until_status(s: Stack, state: str, timeout: float = 30.0) -> dict:
    async def poll() -> dict:
        while (body := await status(s))["state"] != state:
            await asyncio.sleep(0.05)
        return body

    return await asyncio.wait_for(poll(), timeout)


async def submit_refused(s: Stack) -> None:
    body = {"name": "late", "command": "true", "num_gpus": 1}
    r = await s.client.post("/v1/jobs", json=body, headers=bearer("osl-erin"))
    assert r.status_code == 503 and r.json()["error"]["code"] == "SERVICE_MAINTENANCE", r.text


async def test_M1_to_M4_full_maintenance_cycle_with_running_job_and_backfill(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with start_stack(nats_url, pool, pg_dsn) as s:
        await full_cycle(s)


async def test_M1_to_M4_maintenance_cycle_completes_while_the_log_grows(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """The same cycle while another writer appends a steady stream of events every service
    reads live (charges of a lab with no job here: folded, projected, and a dispatcher wake-up
    each, but no decision of the cycle depends on them). The services read catch-up and live
    through one pipelined reader (jpu.bus.ordered); the race a faster live reader exposed (a
    BackfillStarted after a JobDispatched of the same GPU) must not come back under this load."""
    async with start_stack(nats_url, pool, pg_dsn) as s:
        async with appending(s) as appended:
            await full_cycle(s)
        assert appended[0] >= 500  # the cycle really ran beside the load
        total = float(appended[0])
        await s.until(lambda st: st.usage["OSL"].value == total, timeout=30)

        async def projected() -> None:  # the services read it all too, not only the test
            sql = "SELECT value FROM lab_usage WHERE lab = 'OSL'"
            while await pool.fetchval(sql) != total:
                await asyncio.sleep(0.1)

        await asyncio.wait_for(projected(), 30)


@contextlib.asynccontextmanager
async def appending(s: Stack, per_batch: int = 20, gap_s: float = 0.02) -> AsyncIterator[list[int]]:
    """Another writer: `per_batch` UsageCharged of lab OSL every `gap_s` until the block ends
    (each batch whole: `value_after` of the last one appended is the count); yields [count]."""
    count, stop = [0], asyncio.Event()

    async def load() -> None:
        while not stop.is_set():
            now, first = time.time(), count[0] + 1
            batch = [charge(now, float(v)) for v in range(first, first + per_batch)]
            await s.bus.append_many(batch)
            count[0] += per_batch
            await asyncio.sleep(gap_s)

    def charge(now: float, value_after: float) -> UsageCharged:
        return UsageCharged(
            event_id=new_event_id(), ts=now, lab="OSL", amount=1.0, value_after=value_after,
            as_of=now, reason="initial",
        )  # fmt: skip

    task = asyncio.create_task(load())
    try:
        yield count
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)  # and an append that failed fails the test


async def full_cycle(s: Stack) -> None:
    await s.until(lambda st: len(st.backfill) == 2)
    # runs until the test lets it end (a timed `sleep` could end before M1's checks on a slow
    # machine, and "running jobs finish normally" would then prove nothing)
    go = world_searchable_tmpdir("jpu-m1-") / "go"
    running = await s.submit("bcg-alice", f"while [ ! -e {go} ]; do sleep 0.1; done")
    await s.until(lambda st: st.jobs[running].state == "RUNNING")
    queued = await s.submit("kdg-carol", "sleep 30", num_gpus=2)  # rank 1: reserves (R2)
    await s.until(lambda st: st.jobs[queued].state == "RESERVING")
    doomed = await s.submit("bcg-bob", "sleep 30")  # waits behind the reservation
    (res,) = [e for e in await s.events(ReservationStarted) if e.job_id == queued]
    kept = s.state.backfill[(NODE, TIER, res.gpus[0])]  # R2: backfill under the reservation

    # M1: DRAINING — 503 on submit, reservation released and charged, backfill continues
    r = await s.maintenance("start", "NFS volume swap")
    assert r.status_code == 200 and r.json()["state"] == "DRAINING", r.text
    assert (await status(s))["message"] == "NFS volume swap"
    await submit_refused(s)
    await s.until(lambda st: st.jobs[queued].state == "GLOBAL_QUEUE_WAIT")
    (rel,) = [e for e in await s.events(ReservationReleased) if e.job_id == queued]
    assert rel.reason == "maintenance" and rel.charged_now  # R5: charged like R3
    await s.until(lambda st: "KDG" in st.usage)
    charge = [c for c in await s.events(UsageCharged) if c.job_id == queued]
    assert [c.reason for c in charge] == ["maintenance"]
    r = await s.client.post(f"/v1/jobs/{doomed}/cancel", headers=bearer("bcg-bob"))
    assert r.status_code == 202, r.text  # M1: cancellation is allowed
    await s.until(lambda st: st.jobs[doomed].state == "CANCELLED")
    assert s.state.jobs[running].state == "RUNNING"  # running jobs finish normally
    assert kept in s.state.backfill.values()  # LLM backfill keeps running while draining
    go.touch()  # now the running job ends, on its own

    # M2 → M3: the running job ends; backfill is reclaimed; ACTIVE once none remains
    await until_status(s, "ACTIVE", timeout=30)
    assert s.state.jobs[running].state == "COMPLETED"
    assert not s.state.backfill
    reclaimed = [e for e in await s.events(BackfillEnded) if e.reason == "reclaimed"]
    assert kept in {e.backfill_id for e in reclaimed}
    await submit_refused(s)  # Q3 in every maintenance state
    starts = len(await s.events(BackfillStarted))
    await s.backfill_rounds(after_s=s.config.backfill_settle_s)  # idle GPUs, settled
    assert len(await s.events(BackfillStarted)) == starts  # M2: no new backfill
    assert not await s.events(JobDispatched) or all(
        e.job_id != queued for e in await s.events(JobDispatched)
    )  # D6: nothing dispatched during maintenance
    r = await s.client.get("/v1/queue", headers=bearer("bcg-alice"))
    (entry,) = r.json()["queue"]
    assert entry["job_id"] == queued and entry["pending_reason"] == "Maintenance"

    # M4: NORMAL — the queued job dispatches
    r = await s.maintenance("end", "done")
    assert r.status_code == 200 and r.json()["state"] == "NORMAL", r.text
    await s.until(lambda st: st.jobs[queued].state == "RUNNING", timeout=30)
    changes = await s.events(MaintenanceChanged)
    assert [(c.state, c.by) for c in changes] == [
        ("DRAINING", "admin"),
        ("BACKFILL_RECOVERY", "dispatcher"),
        ("ACTIVE", "dispatcher"),
        ("NORMAL", "admin"),
    ]
    assert all(c.message for c in changes)
    assert (await status(s))["state"] == "NORMAL"
