"""Accounting on a real JetStream + PostgreSQL: lazy charging, R3, exactly-once (SPEC F, R3, O5)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec

from jpu.bus import EventBus
from jpu.config import Config, LabConfig, Node, load_config
from jpu.events import (
    JobEnded,
    JobSubmitted,
    ReservationReleased,
    UsageCharged,
    new_event_id,
)
from jpu.policy.fairshare import charge, decayed
from jpu.policy.model import LabUsage
from jpu.runtime.clock import FakeClock
from jpu.store import wait_applied
from jpu.testing.fold import Watcher, decided_on, end_job, job_id, start_job, submit_global
from jpu_services.accounting.charger import Charger
from jpu_services.accounting.service import run_accounting
from jpu_services.dispatcher.service import DispatcherStats, run_dispatcher

HALF_LIFE = 7 * 24 * 3600.0


@asynccontextmanager
async def service(coro_fn, *args, **kw) -> AsyncIterator[asyncio.Task]:
    stop = asyncio.Event()
    task = asyncio.create_task(coro_fn(*args, stop, **kw))
    try:
        yield task
    finally:
        stop.set()
        if not task.done():
            await asyncio.wait_for(task, 15)


async def charges(bus: EventBus) -> list[UsageCharged]:
    return [d.event async for d in bus.replay() if isinstance(d.event, UsageCharged)]


def r3_config() -> Config:
    base = load_config(env={})
    return msgspec.structs.replace(
        base,
        nodes=[
            Node(name="gpu-4090x2-01", gpus={"rtx4090": 2}),
            Node(name="gpu-3080tix2-01", gpus={"rtx3080ti": 2}),
        ],
        labs=[
            LabConfig(name="BCG", usage=24_000),
            LabConfig(name="KDG", usage=28_000),
            LabConfig(name="OTH", usage=1e9),
        ],
        cycle_s=0.5,
        min_cycle_gap_s=0.02,
    )


async def test_R3_worked_example_demotion_charges_24780_at_once(bus: EventBus, pool):
    config, clock, stats = r3_config(), FakeClock(0.0), DispatcherStats()
    g = ["rtx4090"]
    async with (
        Watcher(bus, config) as w,
        service(run_accounting, bus, config, clock, pool=pool),
        service(run_dispatcher, bus, config, clock, stats=stats),
    ):
        await w.until(lambda s: len(s.usage) == 3)  # initial usage charged once
        other, y = job_id(), job_id()
        await submit_global(bus, clock, other, "OTH", "olga", 1, tiers=g)
        await submit_global(bus, clock, y, "BCG", "bob", 1, tiers=["rtx3080ti"])
        await w.until(lambda s: all(s.jobs.get(j) and s.jobs[j].placement for j in (other, y)))
        await start_job(bus, w.state, clock, other)
        await start_job(bus, w.state, clock, y)
        # T+0: X (BCG, 2 GPUs) is rank 1 and reserves the one idle rtx4090
        clock.set(100.0)
        x, k = job_id(), job_id()
        await submit_global(bus, clock, x, "BCG", "alice", 2, tiers=g)
        await w.until(lambda s: s.jobs.get(x) and s.jobs[x].state == "RESERVING")
        k_seq = await submit_global(bus, clock, k, "KDG", "carol", 1, tiers=g)
        await decided_on(stats, k_seq)  # a cycle saw K: whatever it decided is in the log
        last = await bus.last_seq()
        await w.until(lambda s: s.seq >= last)
        assert w.state.jobs[k].state == "GLOBAL_QUEUE_WAIT"  # X's reserved GPU is not for K
        x_entered = w.state.jobs[x].queue_entered_at
        # T+5min: Y ends; its cost brings BCG to ~32,000, above KDG's 28,000
        clock.set(400.0)
        await w.until(lambda s: s.jobs[y].state == "RUNNING")
        await end_job(bus, w.state, config, clock, y, usage=8_000.0)
        # next cycle: X is rank 2 → R3: release, charge 1 × 300 × 82.6 = 24,780 to BCG at once
        await w.until(lambda s: s.jobs[k].state == "DISPATCHED")
        await w.until(lambda s: s.usage["BCG"].value > 50_000, timeout=5)  # Y + X's charges
        assert w.state.jobs[x].state == "GLOBAL_QUEUE_WAIT"
        assert w.state.jobs[x].queue_entered_at == x_entered  # keeps its place in time
        log = [d.event async for d in bus.replay()]
        release = [e for e in log if isinstance(e, ReservationReleased)]
        assert [(r.job_id, r.reason, r.charged_now) for r in release] == [(x, "demoted", True)]
        assert release[0].gpu_seconds == 300.0
        demoted = [e for e in log if isinstance(e, UsageCharged) and e.reason == "demoted"]
        assert len(demoted) == 1 and demoted[0].lab == "BCG"
        assert abs(demoted[0].amount - 24_780.0) < 1e-6  # to the TFLOP-s
        before = LabUsage(24_000.0, 0.0)
        after_y = charge(before, 8_000.0, 400.0, HALF_LIFE)
        assert after_y.value > decayed(LabUsage(28_000.0, 0.0), 400.0, HALF_LIFE)
        expected = charge(after_y, 24_780.0, 400.0, HALF_LIFE)
        assert abs(demoted[0].value_after - expected.value) < 1e-6
        # the projection owned by accounting shows the same numbers (E3)
        await wait_applied(pool, "lab_usage", w.state.lab_seq["BCG"], timeout=10)
        row = await pool.fetchrow("SELECT value, as_of FROM lab_usage WHERE lab = 'BCG'")
        assert abs(row["value"] - expected.value) < 1e-6


def _sources(rng: random.Random, n: int) -> tuple[list[JobSubmitted], list]:
    submits, ends = [], []
    for i in range(n):
        jid, lab = f"j{i:03d}", rng.choice(["A", "B"])
        submits.append(
            JobSubmitted(
                event_id=new_event_id(),
                ts=float(i),
                job_id=jid,
                lab=lab,
                user="u",
                name="n",
                command="true",
                num_gpus=1,
            )
        )
        if i % 5 == 0:  # an R3 release charged at once
            ends.append(
                ReservationReleased(
                    event_id=new_event_id(),
                    ts=10.0 * i,
                    job_id=jid,
                    node="n",
                    tier="rtx4090",
                    gpus=[0],
                    reason="demoted",
                    gpu_seconds=rng.uniform(1, 600),
                    charged_now=True,
                    tflops=82.6,
                )
            )
        ends.append(
            JobEnded(
                event_id=new_event_id(),
                ts=10.0 * i + 5,
                job_id=jid,
                attempt=1,
                state="COMPLETED",
                gpu_seconds_run=100.0,
                tflops=82.6,
                usage=rng.uniform(100, 100_000),
            )
        )
    return submits, ends


async def settled(bus: EventBus, chargers: list[Charger], timeout: float = 30.0) -> None:
    """Proof that nothing more will be charged (not a pause): every replica has folded the log up
    to its last event and owes nothing, and the log did not grow meanwhile."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        last = await bus.last_seq()
        folded = all(c.state.seq >= last and not c.pending for c in chargers)
        if folded and await bus.last_seq() == last:
            return
        assert asyncio.get_running_loop().time() < deadline, [c.state.seq for c in chargers]
        await asyncio.sleep(0.05)


def _amount(e) -> float:
    return e.usage if isinstance(e, JobEnded) else e.gpu_seconds * e.tflops


async def test_F5_O5_replicas_and_restart_mid_stream_never_double_charge(bus: EventBus, pool):
    config = msgspec.structs.replace(
        load_config(env={}), labs=[LabConfig(name="A", usage=5_000.0), LabConfig(name="B")]
    )
    clock, rng = FakeClock(0.0), random.Random(5)
    submits, ends = _sources(rng, 60)
    await bus.append_many(submits)
    out: list[Charger] = []  # the replicas that live to the end
    killed: list[Charger] = []
    async with Watcher(bus, config) as w:
        a1 = service(run_accounting, bus, config, clock, pool=pool, charger_out=killed)
        a2 = service(run_accounting, bus, config, clock, charger_out=out)
        async with a2:
            async with a1 as t1:
                await bus.append_many(ends[: len(ends) // 2])
                await asyncio.sleep(0.05)
                while not t1.done():  # killed mid-stream (a crash: no graceful stop);
                    t1.cancel()  # repeated: 3.11's wait_for inside nats-py may eat one cancel
                    await asyncio.sleep(0.01)
            await bus.append_many(ends[len(ends) // 2 :])
            # a restarted replica joins while a2 still runs (O5: replay, then carry on)
            async with service(run_accounting, bus, config, clock, pool=pool, charger_out=out):
                want = len(ends) + 1  # + the initial usage of A
                await w.until(lambda s: len(s.charged_ids) >= want, timeout=30)
                await settled(bus, out)  # both live replicas are past every source: no more
                await w.synced()  # and the read model has the last charge while its replica runs
                seq = max(w.state.lab_seq.values())
                await wait_applied(pool, "lab_usage", seq, timeout=10)
    log = await charges(bus)
    ids = Counter(c.event_id for c in log)
    assert len(log) == len(ends) + 1 and max(ids.values()) == 1
    assert {c.event_id for c in log} == {f"chg-{e.event_id}" for e in ends} | {"init-A"}
    # F5: every held GPU-second charged exactly once, to the TFLOP-s
    total = sum(c.amount for c in log if c.reason != "initial")
    assert abs(total - sum(map(_amount, ends))) < 1e-6 * total
    # every charge builds on the previous one of its lab: replay reproduces the usage (F3, F5)
    last: dict[str, LabUsage] = {}
    for c in log:
        prev = last.get(c.lab, LabUsage())
        expect = charge(prev, c.amount, c.ts, HALF_LIFE)
        assert abs(c.value_after - expect.value) <= 1e-9 * max(1.0, expect.value)
        last[c.lab] = LabUsage(c.value_after, c.as_of)
    # replicas did compete (conflicts / duplicates refused), yet nothing was charged twice
    assert sum(c.appended for c in [*killed, *out]) >= len(log)
    rows = {r["lab"]: r["value"] for r in await pool.fetch("SELECT lab, value FROM lab_usage")}
    assert rows == {lab: u.value for lab, u in last.items()}
