"""The dispatcher service on a real JetStream: cycle, placement, reservations (SPEC §4)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import msgspec
import pytest

from jpu.bus import EventBus
from jpu.config import Config, Node, load_config
from jpu.domain.cluster import ClusterState, evolve
from jpu.events import (
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobSubmitted,
    NodeInventoryObserved,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
    UsageCharged,
    new_event_id,
)
from jpu.runtime.clock import FakeClock
from jpu.testing.fold import Watcher, decided_on, end_job, job_id, start_job, submit_global
from jpu_services.dispatcher.service import DispatcherStats, run_dispatcher


def fast_config(**kw) -> Config:
    base = load_config(env={})
    return msgspec.structs.replace(base, cycle_s=0.5, min_cycle_gap_s=0.02, **kw)


@asynccontextmanager
async def dispatcher(bus: EventBus, config: Config, clock, **kw) -> AsyncIterator[DispatcherStats]:
    stop, stats = asyncio.Event(), DispatcherStats()
    task = asyncio.create_task(run_dispatcher(bus, config, clock, stop, stats=stats, **kw))
    try:
        yield stats
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def initial_usage(bus: EventBus, clock: FakeClock, **usage: float) -> None:
    """The labs' starting usage (O1), as accounting charges it at load."""
    now = clock.now()
    await bus.append_many(
        [
            UsageCharged(event_id=new_event_id(), ts=now, lab=lab, amount=v, value_after=v,
                         as_of=now, reason="initial")
            for lab, v in usage.items()
        ]
    )  # fmt: skip


def state_of(s, jid: str) -> str | None:
    job = s.jobs.get(jid)
    return job.state if job is not None else None


async def dispatches(bus: EventBus) -> list[JobDispatched]:
    return [d.event async for d in bus.replay() if isinstance(d.event, JobDispatched)]


async def test_T1_D8_one_gpu_job_starts_on_rtx4090_in_well_under_a_second(bus: EventBus):
    config, clock = fast_config(), FakeClock(1000.0)
    async with Watcher(bus, config) as w, dispatcher(bus, config, clock) as stats:
        await w.until(lambda s: stats.leader, timeout=10)
        jid = job_id()
        t0 = time.monotonic()
        await submit_global(bus, clock, jid, "BCG", "alice", 1)
        await w.until(lambda s: s.jobs.get(jid) and s.jobs[jid].state == "DISPATCHED")
        latency = time.monotonic() - t0
        node, tier, gpus = w.state.jobs[jid].placement
        assert tier == "rtx4090" and len(gpus) == 1  # T1: best tier first
        assert latency < 1.0, latency  # D8: not waiting for the periodic cycle
        # D4 best fit: the next 1-GPU job fills the same node, keeping the other 4090 node whole
        jid2 = job_id()
        await submit_global(bus, clock, jid2, "KDG", "carol", 1)
        await w.until(lambda s: s.jobs.get(jid2) and s.jobs[jid2].state == "DISPATCHED")
        assert w.state.jobs[jid2].placement[0] == node


async def test_R1_R2_two_gpu_job_reserves_then_runs_while_others_arrive(bus: EventBus):
    tiers_4090 = ["rtx4090"]
    config, clock = fast_config(), FakeClock(1000.0)
    async with Watcher(bus, config) as w, dispatcher(bus, config, clock):
        # fill one GPU on each rtx4090 node (labs with high usage would not matter: running)
        fillers = [job_id(), job_id(), job_id()]
        for f in fillers:
            await submit_global(bus, clock, f, "OTH", "olga", 1, tiers=tiers_4090)
        await w.until(lambda s: sum(state_of(s, f) == "DISPATCHED" for f in fillers) == 3)
        # 3 of 4 rtx4090 GPUs busy: X (2 GPUs) must reserve the free one (R1, rank 1)
        x = job_id()
        clock.advance(10)
        await submit_global(bus, clock, x, "BCG", "alice", 2, tiers=tiers_4090)
        await w.until(lambda s: state_of(s, x) == "RESERVING")
        res = w.state.jobs[x].reservation
        assert len(res.gpus) == 1
        # 1-GPU jobs of other labs arrive: they must not take X's reserved GPU (R2, D5)
        others = [job_id(), job_id()]
        for o in others:
            clock.advance(1)
            await submit_global(bus, clock, o, "KDG", "carol", 1, tiers=tiers_4090)
        await w.ranked(others)  # a cycle decided on them (a positive signal, not a pause)
        assert all(w.state.jobs[o].state == "GLOBAL_QUEUE_WAIT" for o in others)
        # the filler on X's node ends: X grows to 2 GPUs and dispatches there
        filler = next(f for f in fillers if w.state.jobs[f].placement[0] == res.node)
        await start_job(bus, w.state, clock, filler)
        await w.until(lambda s: s.jobs[filler].state == "RUNNING")
        clock.advance(60)
        await end_job(bus, w.state, config, clock, filler)
        await w.until(lambda s: s.jobs[x].state == "DISPATCHED")
        assert w.state.jobs[x].placement[0] == res.node
        assert len(w.state.jobs[x].placement[2]) == 2
        # X held one GPU reserved for 1 + 1 + 60 s: uncharged now, charged at its end (R4, F4)
        assert abs(w.state.jobs[x].uncharged_reserved_gpu_s - 62.0) < 1e-9
        starts = [d.event async for d in bus.replay() if isinstance(d.event, ReservationStarted)]
        assert [s.job_id for s in starts] == [x]
        # S3/E6: the state is a fold of the log; replaying it from seq 1 gives the same state
        live = await w.synced()
        rebuilt = ClusterState.new(config)
        async for d in bus.replay():
            evolve(rebuilt, d)
        assert rebuilt == live


async def test_D1_F4_R3_worked_example_with_Y_beside_X_ranks_Ys_cost_before_accounting(
    bus: EventBus,
):
    """SPEC R3's worked example with Y on the other GPU of X's placement.

    Y's end frees the GPU X waits for. The cycle that JobEnded triggers must already rank BCG
    with Y's cost (32,000 > KDG's 28,000): X is demoted (charged 1 × 300 × 82.6 = 24,780), never
    dispatched on stale usage. Accounting is not running at all here, so nothing but the log's
    own JobEnded can carry the cost into the ranking."""
    nodes = [Node(name="gpu-4090x2-01", gpus={"rtx4090": 2})]
    config, clock = fast_config(nodes=nodes), FakeClock(10_000.0)
    await initial_usage(bus, clock, BCG=24_000.0, KDG=28_000.0)
    async with Watcher(bus, config) as w, dispatcher(bus, config, clock) as stats:
        y, x, k = job_id(), job_id(), job_id()
        await submit_global(bus, clock, y, "BCG", "bob", 1)
        await w.until(lambda s: state_of(s, y) == "DISPATCHED")
        await start_job(bus, w.state, clock, y)
        await submit_global(bus, clock, x, "BCG", "alice", 2)  # T+0: rank 1, reserves 1 of 2
        await w.until(lambda s: state_of(s, x) == "RESERVING")
        assert w.state.jobs[x].reservation.gpus == (1 - w.state.jobs[y].placement[2][0],)
        k_seq = await submit_global(bus, clock, k, "KDG", "carol", 2)  # ranked below BCG for now
        await decided_on(stats, k_seq)  # a cycle saw K: whatever it decided is in the log
        last = await bus.last_seq()
        await w.until(lambda s: s.seq >= last)
        assert state_of(w.state, k) == "GLOBAL_QUEUE_WAIT"
        clock.advance(300)  # T+5min: Y ends; its cost brings BCG to 32,000
        await end_job(bus, w.state, config, clock, y, usage=8_000.0)
        await w.until(lambda s: state_of(s, k) in ("DISPATCHED", "RESERVING"))
        assert state_of(w.state, x) == "GLOBAL_QUEUE_WAIT"
    log = [d.event async for d in bus.replay()]
    assert not [e for e in log if isinstance(e, JobDispatched) and e.job_id == x]
    (released,) = [e for e in log if isinstance(e, ReservationReleased) and e.job_id == x]
    assert released.reason == "demoted" and released.charged_now
    assert released.gpu_seconds * released.tflops == pytest.approx(24_780.0, abs=1e-6)


def test_F4_an_owed_charge_counts_once_before_and_after_accounting_writes_it() -> None:
    """The fold's owed charge and accounting's UsageCharged for it never add up twice."""
    from jpu.bus import Delivered
    from jpu.domain.dispatch import snapshot
    from jpu.policy.charging import charge_id
    from jpu.policy.fairshare import decayed

    config = fast_config()
    state = ClusterState.new(config)
    seq = iter(range(1, 100))

    def feed(e) -> None:
        evolve(state, Delivered(next(seq), f"jpu.job.{getattr(e, 'job_id', '')}", e, {}))

    jid, t = "j1", 1_000.0
    feed(JobSubmitted(event_id="s", ts=t, job_id=jid, lab="BCG", user="u", name="n",
                      command="c", num_gpus=1))  # fmt: skip
    feed(JobPromoted(event_id="p", ts=t, job_id=jid, queue_entered_at=t))
    feed(JobDispatched(event_id="d", ts=t, job_id=jid, attempt=1, node="n", tier="rtx4090",
                       gpus=[0]))  # fmt: skip
    ended = JobEnded(event_id="e", ts=t + 100, job_id=jid, attempt=1, state="COMPLETED",
                     gpu_seconds_run=100.0, tflops=82.6, usage=8_260.0)  # fmt: skip
    feed(ended)
    at = t + 100
    owed = snapshot(state, config).usage["BCG"]
    assert decayed(owed, at, config.half_life_s) == pytest.approx(8_260.0)
    feed(UsageCharged(event_id=charge_id(ended.event_id), ts=at + 1, lab="BCG", amount=8_260.0,
                      value_after=8_260.0, as_of=at, job_id=jid))  # fmt: skip
    assert state.owed == {}
    assert snapshot(state, config).usage["BCG"].value == pytest.approx(8_260.0)


async def test_R5_a_lost_reserved_gpu_leaves_the_reservation_and_the_rest_is_kept(bus: EventBus):
    """SPEC R5 on the live dispatcher: one reserved GPU goes down while the placement
    still fits the job; the reservation drops that GPU (ReservationShrunk), keeps the other, and
    the lost GPU's held time is charged with the attempt's end (F4)."""
    base = fast_config()
    big = msgspec.structs.replace(base.tier("rtx4090"), max_gpus=4)
    config = msgspec.structs.replace(
        base,
        tiers=[big, base.tier("rtx3080ti")],
        nodes=[Node(name="gpu-4090x4-01", gpus={"rtx4090": 4})],
    )
    clock = FakeClock(1000.0)
    async with Watcher(bus, config) as w, dispatcher(bus, config, clock):
        fillers = [job_id(), job_id()]
        for f in fillers:
            await submit_global(bus, clock, f, "OTH", "olga", 1)
        await w.until(lambda s: all(state_of(s, f) == "DISPATCHED" for f in fillers))
        x = job_id()
        await submit_global(bus, clock, x, "BCG", "alice", 3)
        await w.until(lambda s: state_of(s, x) == "RESERVING")
        held = w.state.jobs[x].reservation.gpus
        assert len(held) == 2
        clock.advance(50)
        lost = held[1]
        await bus.append(
            NodeInventoryObserved(
                event_id=new_event_id(), ts=clock.now(), node="gpu-4090x4-01",
                gpus={"rtx4090": 4}, down={"rtx4090": [lost]},
            )
        )  # fmt: skip
        await w.until(lambda s: s.jobs[x].reservation and len(s.jobs[x].reservation.gpus) == 1)
        assert state_of(w.state, x) == "RESERVING"  # R5: kept, capacity 3 >= 3
        assert w.state.jobs[x].reservation.gpus == (held[0],)
        assert w.state.jobs[x].uncharged_reserved_gpu_s == pytest.approx(50.0)
    log = [d.event async for d in bus.replay()]
    assert not [e for e in log if isinstance(e, ReservationReleased) and e.job_id == x]
    (shrunk,) = [e for e in log if isinstance(e, ReservationShrunk)]
    assert (shrunk.job_id, shrunk.removed, shrunk.gpus) == (x, [lost], [held[0]])
    assert shrunk.gpu_seconds == pytest.approx(50.0) and shrunk.tflops == 82.6


async def test_R6_dispatcher_honours_reservation_demotion_useful(bus: EventBus):
    """SPEC R6 through the real config path (JPU_RESERVATION_DEMOTION=useful): R3's worked
    example, but KDG's job only admits rtx3080ti, so releasing X's rtx4090 GPU would help no
    one. X keeps its reservation although it is rank 2, absorbs Y's freed GPU (which KDG cannot
    use) and dispatches; nothing is charged at release (strict would demote and charge 24,780)."""
    base = load_config(env={"JPU_RESERVATION_DEMOTION": "useful"})
    assert base.reservation_demotion == "useful"
    nodes = [
        Node(name="gpu-4090x2-01", gpus={"rtx4090": 2}),
        Node(name="gpu-3080tix2-01", gpus={"rtx3080ti": 2}),
    ]
    config = msgspec.structs.replace(base, cycle_s=0.5, min_cycle_gap_s=0.02, nodes=nodes)
    clock = FakeClock(10_000.0)
    await initial_usage(bus, clock, BCG=24_000.0, KDG=28_000.0, OTH=1e9)
    async with Watcher(bus, config) as w, dispatcher(bus, config, clock):
        f, y, x, k = job_id(), job_id(), job_id(), job_id()
        await submit_global(bus, clock, f, "OTH", "olga", 1, tiers=["rtx3080ti"])
        await w.until(lambda s: state_of(s, f) == "DISPATCHED")
        await submit_global(bus, clock, y, "BCG", "bob", 1)
        await w.until(lambda s: state_of(s, y) == "DISPATCHED")
        await start_job(bus, w.state, clock, y)
        await submit_global(bus, clock, x, "BCG", "alice", 2)  # rank 1: reserves 1 rtx4090
        await w.until(lambda s: state_of(s, x) == "RESERVING")
        assert w.state.jobs[x].reservation.tier == "rtx4090"
        await submit_global(bus, clock, k, "KDG", "carol", 2, tiers=["rtx3080ti"])
        clock.advance(300)  # Y ends: BCG 32,000 > KDG 28,000, k is rank 1
        await end_job(bus, w.state, config, clock, y, usage=8_000.0)
        await w.until(lambda s: state_of(s, x) == "DISPATCHED" and state_of(s, k) == "RESERVING")
    log = [d.event async for d in bus.replay()]
    (released,) = [e for e in log if isinstance(e, ReservationReleased) and e.job_id == x]
    assert released.reason == "dispatched" and not released.charged_now  # R4/F4: lazily
    assert [e.job_id for e in log if isinstance(e, ReservationStarted)] == [x, k]  # R1: rank 1


async def test_R6_dispatcher_honours_reservation_demotion_yield(bus: EventBus):
    """SPEC R6 `yield` through the real config path (JPU_RESERVATION_DEMOTION=yield): X (BCG,
    4 GPUs) reserves the 2 free GPUs of a 4-GPU node; Y (BCG) ends, so KDG's k (2 GPUs) ranks
    above X and can start on Y's freed GPU plus one of X's, and nowhere else. X gives back
    exactly that one (ReservationShrunk, reason yielded), keeps the other, and nothing is charged
    now: the yielded GPU's 300 s ride with X's attempt (F4). strict would release both GPUs and
    charge 2 × 300 × 82.6 at once."""
    base = load_config(env={"JPU_RESERVATION_DEMOTION": "yield"})
    assert base.reservation_demotion == "yield"
    big = msgspec.structs.replace(base.tier("rtx4090"), max_gpus=4)
    config = msgspec.structs.replace(
        base,
        cycle_s=0.5,
        min_cycle_gap_s=0.02,
        tiers=[big, base.tier("rtx3080ti")],
        nodes=[Node(name="gpu-4090x4-01", gpus={"rtx4090": 4})],
    )
    clock = FakeClock(10_000.0)
    await initial_usage(bus, clock, BCG=24_000.0, KDG=28_000.0, OTH=1e9)
    async with Watcher(bus, config) as w, dispatcher(bus, config, clock):
        f, y, x, k = job_id(), job_id(), job_id(), job_id()
        await submit_global(bus, clock, f, "OTH", "olga", 1)
        await w.until(lambda s: state_of(s, f) == "DISPATCHED")
        await submit_global(bus, clock, y, "BCG", "bob", 1)
        await w.until(lambda s: state_of(s, y) == "DISPATCHED")
        await start_job(bus, w.state, clock, y)
        await submit_global(bus, clock, x, "BCG", "alice", 4)  # rank 1: reserves the 2 free
        await w.until(lambda s: state_of(s, x) == "RESERVING")
        held = w.state.jobs[x].reservation.gpus
        assert len(held) == 2
        await submit_global(bus, clock, k, "KDG", "carol", 2)
        clock.advance(300)  # Y ends: BCG 32,000 > KDG 28,000, k is rank 1
        await end_job(bus, w.state, config, clock, y, usage=8_000.0)
        await w.until(lambda s: state_of(s, k) == "DISPATCHED")
        assert state_of(w.state, x) == "RESERVING"  # parked with the rest
        assert len(w.state.jobs[x].reservation.gpus) == 1
        assert w.state.jobs[x].uncharged_reserved_gpu_s == pytest.approx(300.0)
    log = [d.event async for d in bus.replay()]
    assert not [e for e in log if isinstance(e, ReservationReleased) and e.job_id == x]
    (shrunk,) = [e for e in log if isinstance(e, ReservationShrunk)]
    assert (shrunk.job_id, shrunk.reason, len(shrunk.removed)) == (x, "yielded", 1)
    assert set(shrunk.removed) | set(shrunk.gpus) == set(held)
    assert shrunk.gpu_seconds == pytest.approx(300.0) and shrunk.tflops == 82.6
    (dk,) = [e for e in log if isinstance(e, JobDispatched) and e.job_id == k]
    assert set(shrunk.removed) < set(dk.gpus)  # D5: the higher job starts on what X gave back
