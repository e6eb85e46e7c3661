"""Dispatcher duties beside the cycle: OOM escalation (X8), cancelling queued jobs (R5),
maintenance automation (M1–M3); charged by accounting exactly once (F4, F5)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec

from jpu.bus import EventBus
from jpu.config import Config, load_config
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobCancelRequested,
    JobEnded,
    JobRetryDeclined,
    JobRetryScheduled,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationReleased,
    UsageCharged,
    new_event_id,
)
from jpu.runtime.clock import FakeClock
from jpu.testing.fold import Watcher, end_job, job_id, start_job, submit_global
from jpu_services.accounting.service import run_accounting
from jpu_services.dispatcher.service import run_dispatcher


def fast() -> Config:
    return msgspec.structs.replace(load_config(env={}), cycle_s=0.5, min_cycle_gap_s=0.02)


@asynccontextmanager
async def running(fn, *args, **kw) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(fn(*args, stop, **kw))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def log_of(bus: EventBus) -> list:
    return [d.event async for d in bus.replay()]


async def until_logged(bus: EventBus, pred, timeout: float = 10.0) -> None:
    """Poll the log until an event satisfies `pred`; fail after `timeout` s."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not any(pred(e) for e in await log_of(bus)):
        assert asyncio.get_running_loop().time() < deadline, "the event never came"
        await asyncio.sleep(0.05)


async def run_and_end(bus, w, config, clock, jid, **kw) -> None:
    await start_job(bus, w.state, clock, jid)
    await w.until(lambda s: s.jobs[jid].state == "RUNNING")
    clock.advance(120)
    await end_job(bus, w.state, config, clock, jid, **kw)


async def test_X8_gpu_oom_retries_with_more_vram_then_fails_when_nothing_bigger(bus: EventBus):
    config, clock = fast(), FakeClock(1000.0)
    async with Watcher(bus, config) as w, running(run_dispatcher, bus, config, clock):
        fillers = [job_id() for _ in range(4)]  # all four rtx4090 GPUs busy
        for f in fillers:
            await submit_global(bus, clock, f, "OTH", "olga", 1, tiers=["rtx4090"])
        await w.until(lambda s: all(s.jobs.get(f) and s.jobs[f].placement for f in fillers))
        clock.advance(5)
        j = job_id()
        await submit_global(bus, clock, j, "BCG", "alice", 1)
        await w.until(lambda s: s.jobs.get(j) and s.jobs[j].placement)
        assert w.state.jobs[j].placement[1] == "rtx3080ti"
        entered = w.state.jobs[j].queue_entered_at
        await run_and_end(bus, w, config, clock, j, final="FAILED", oom=True)
        # attempt 2 needs > 12 GB: back in the global queue, keeping queue_entered_at
        await w.until(lambda s: s.jobs[j].attempt == 2 and s.jobs[j].state == "GLOBAL_QUEUE_WAIT")
        assert w.state.jobs[j].min_vram_gb == 13 and w.state.jobs[j].queue_entered_at == entered
        await run_and_end(bus, w, config, clock, fillers[0])
        await w.until(lambda s: s.jobs[j].state == "DISPATCHED")
        assert w.state.jobs[j].placement[1] == "rtx4090" and w.state.jobs[j].attempt == 2
        # OOM on 24 GB: no tier has more → stays FAILED (reason OOM), no further retry
        await run_and_end(bus, w, config, clock, j, final="FAILED", oom=True)
        # the dispatcher's answer to that end is on the log: declined, decided once (a positive
        # signal, not a pause; a retry would have been the other answer)
        await until_logged(bus, lambda e: isinstance(e, JobRetryDeclined) and e.job_id == j)
        assert w.state.jobs[j].state == "FAILED"
    retries = [e for e in await log_of(bus) if isinstance(e, JobRetryScheduled)]
    assert [(r.job_id, r.attempt, r.min_vram_gb) for r in retries] == [(j, 2, 13)]
    declined = [e for e in await log_of(bus) if isinstance(e, JobRetryDeclined)]
    assert [(d.job_id, d.attempt, d.reason) for d in declined] == [(j, 2, "no_fit")]


async def test_R5_cancelling_a_reserving_job_charges_the_held_time_with_its_end(bus, pool):
    config, clock = fast(), FakeClock(1000.0)
    async with (
        Watcher(bus, config) as w,
        running(run_dispatcher, bus, config, clock),
        running(run_accounting, bus, config, clock, pool=pool),
    ):
        fillers = [job_id() for _ in range(3)]
        for f in fillers:
            await submit_global(bus, clock, f, "OTH", "olga", 1, tiers=["rtx4090"])
        await w.until(lambda s: all(s.jobs.get(f) and s.jobs[f].placement for f in fillers))
        x = job_id()
        await submit_global(bus, clock, x, "BCG", "alice", 2, tiers=["rtx4090"])
        await w.until(lambda s: s.jobs.get(x) and s.jobs[x].state == "RESERVING")
        clock.advance(100)
        cancel = JobCancelRequested(event_id=new_event_id(), ts=clock.now(), job_id=x, by="alice")
        await bus.append(cancel, expected_last_subject_seq=w.state.jobs[x].last_seq)
        await w.until(lambda s: s.jobs[x].state == "CANCELLED")
        await w.until(lambda s: "BCG" in s.usage)
    log = await log_of(bus)
    rel = [e for e in log if isinstance(e, ReservationReleased)]
    assert [(r.reason, r.charged_now, r.gpu_seconds) for r in rel] == [("cancelled", False, 100.0)]
    end = [e for e in log if isinstance(e, JobEnded)]
    assert len(end) == 1 and end[0].state == "CANCELLED" and end[0].gpu_seconds_reserved == 100.0
    charged = [e for e in log if isinstance(e, UsageCharged)]
    assert len(charged) == 1 and abs(charged[0].amount - 100 * 82.6) < 1e-6  # F2, once


async def test_M1_M2_M3_maintenance_drains_releases_and_advances_automatically(bus, pool):
    config, clock = fast(), FakeClock(1000.0)
    async with (
        Watcher(bus, config) as w,
        running(run_dispatcher, bus, config, clock),
        running(run_accounting, bus, config, clock),
    ):
        fillers = [job_id() for _ in range(3)]
        for f in fillers:
            await submit_global(bus, clock, f, "OTH", "olga", 1, tiers=["rtx4090"])
        await w.until(lambda s: all(s.jobs.get(f) and s.jobs[f].placement for f in fillers))
        x = job_id()
        await submit_global(bus, clock, x, "BCG", "alice", 2, tiers=["rtx4090"])
        await w.until(lambda s: s.jobs.get(x) and s.jobs[x].state == "RESERVING")
        bf = BackfillStarted(
            event_id=new_event_id(),
            ts=clock.now(),
            backfill_id="bf1",
            node="gpu-3080tix2-01",
            tier="rtx3080ti",
            gpu=0,
        )
        await bus.append(bf)
        clock.advance(50)
        drain = MaintenanceChanged(
            event_id=new_event_id(),
            ts=clock.now(),
            state="DRAINING",
            by="admin",
            message="NFS upgrade",
        )
        await bus.append(drain)
        # M1: the reservation is released and charged at once; nothing new is dispatched
        await w.until(lambda s: s.jobs[x].state == "GLOBAL_QUEUE_WAIT")
        late = job_id()
        await submit_global(bus, clock, late, "KDG", "carol", 1)
        for f in fillers:  # running jobs finish normally
            await run_and_end(bus, w, config, clock, f)
        # M2: no user job busy → BACKFILL_RECOVERY; M3: backfill reclaimed → ACTIVE
        await w.until(lambda s: s.maintenance.state == "BACKFILL_RECOVERY")
        assert w.state.jobs[late].state == "GLOBAL_QUEUE_WAIT"
        ended = BackfillEnded(
            event_id=new_event_id(),
            ts=clock.now(),
            backfill_id="bf1",
            node="gpu-3080tix2-01",
            tier="rtx3080ti",
            gpu=0,
            reason="reclaimed",
        )
        await bus.append(ended)
        await w.until(lambda s: s.maintenance.state == "ACTIVE")
        assert w.state.jobs[late].state == "GLOBAL_QUEUE_WAIT"
        await bus.append(
            MaintenanceChanged(event_id=new_event_id(), ts=clock.now(), state="NORMAL", by="admin")
        )
        await w.until(lambda s: s.jobs[late].state == "DISPATCHED")  # M4
        await w.until(lambda s: s.usage.get("BCG") is not None)
    log = await log_of(bus)
    steps = [(e.state, e.by) for e in log if isinstance(e, MaintenanceChanged)]
    assert steps == [
        ("DRAINING", "admin"),
        ("BACKFILL_RECOVERY", "dispatcher"),
        ("ACTIVE", "dispatcher"),
        ("NORMAL", "admin"),
    ]
    rel = [e for e in log if isinstance(e, ReservationReleased)]
    assert [(r.reason, r.charged_now, r.gpu_seconds) for r in rel] == [("maintenance", True, 50.0)]
    maint = [e for e in log if isinstance(e, UsageCharged) and e.reason == "maintenance"]
    assert len(maint) == 1 and abs(maint[0].amount - 50 * 82.6) < 1e-6


async def test_X8_no_bigger_tier_is_decided_once_and_a_returning_node_never_revives_the_job(
    bus: EventBus,
):
    """SPEC X8: "no bigger tier now" was not recorded, so a FAILED job came back as
    attempt 2 when the rtx4090 nodes returned. Decide once, record it (JobRetryDeclined)."""
    config, clock = fast(), FakeClock(1000.0)
    nodes_4090 = [n.name for n in config.nodes if "rtx4090" in n.gpus]

    def inventory(state: str) -> list[NodeInventoryObserved]:
        return [
            NodeInventoryObserved(
                event_id=new_event_id(), ts=clock.now(), node=n, gpus={"rtx4090": 2}, state=state
            )
            for n in nodes_4090
        ]

    await bus.append_many(inventory("down"))
    async with Watcher(bus, config) as w, running(run_dispatcher, bus, config, clock):
        j = job_id()
        await submit_global(bus, clock, j, "BCG", "alice", 1)
        await w.until(lambda s: s.jobs.get(j) and s.jobs[j].placement)
        assert w.state.jobs[j].placement[1] == "rtx3080ti"
        await run_and_end(bus, w, config, clock, j, final="FAILED", oom=True)
        await w.until(lambda s: s.jobs[j].state == "FAILED" and not s.jobs[j].oom_pending)
        assert w.state.jobs[j].state == "FAILED" and not w.state.jobs[j].holds_slot
        clock.advance(86_400)  # a day later the bigger tier is back
        await bus.append_many(inventory("up"))
        # a job only an rtx4090 fits is placed: the dispatcher has folded the returning nodes
        # and run its duties and a cycle on them (a positive signal, not a pause)
        k = job_id()
        await submit_global(bus, clock, k, "OTH", "olga", 1, tiers=["rtx4090"])
        await w.until(lambda s: s.jobs.get(k) and s.jobs[k].placement)
        assert w.state.jobs[j].state == "FAILED" and w.state.jobs[j].attempt == 1
    log = await log_of(bus)
    assert not [e for e in log if isinstance(e, JobRetryScheduled)]
    declined = [e for e in log if isinstance(e, JobRetryDeclined)]
    assert [(d.job_id, d.attempt, d.reason, d.needed_vram_gb) for d in declined] == [
        (j, 1, "no_fit", 13)
    ]
