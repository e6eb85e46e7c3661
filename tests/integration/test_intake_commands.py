"""Intake over NATS request/reply on a real JetStream (SPEC Q1–Q6, §8 error codes)."""

from __future__ import annotations

import asyncio
import time

import msgspec

from jpu.bus import EventBus
from jpu.commands import (
    CancelCommand,
    CommandReply,
    cancel_subject,
    decode_reply,
    encode,
)
from jpu.config import Config, LabConfig, UserConfig, load_config
from jpu.events import JobPromoted, JobSubmitted, MaintenanceChanged, new_event_id
from jpu.runtime.clock import FakeClock
from jpu.testing.fold import Watcher, end_job, job_id, start_job, submit_global
from jpu.testing.intake import BODY, config_with_limits, running, submit, wait_subscribed
from jpu_services.dispatcher.service import run_dispatcher
from jpu_services.intake.service import run_intake


async def intake_has_passed(bus: EventBus, w: Watcher) -> None:
    """Intake promotes another user's new job: its loop has folded everything before it and run
    the promotion rounds those events called for (a positive signal, not a pause)."""
    later = (await submit(bus, BODY, user="bob")).job_id
    await w.until(lambda s: s.jobs.get(later) and s.jobs[later].state != "PERSONAL_QUEUE_WAIT")


async def cancel(bus: EventBus, job_id: str, by="alice") -> CommandReply:
    cmd = CancelCommand(job_id=job_id, by=by)
    msg = await bus.nc.request(cancel_subject(bus.prefix), encode(cmd), timeout=10)
    return decode_reply(msg.data)


async def test_Q1_validation_errors_name_the_field(bus: EventBus):
    config, clock = config_with_limits(), FakeClock(10.0)
    async with running(run_intake, bus, config, clock):
        await wait_subscribed(bus)
        cases = {
            "num_gpus": {**BODY, "num_gpus": 0},
            "command": {**BODY, "command": ""},
            "name": {**BODY, "name": "bad name!"},
            "tiers": {**BODY, "tiers": ["h100"]},
            "env.SLURM_JOB_ID": {**BODY, "env": {"SLURM_JOB_ID": "1"}},
            "env.CUDA_VISIBLE_DEVICES": {**BODY, "env": {"CUDA_VISIBLE_DEVICES": "0"}},
        }
        for field, body in cases.items():
            reply = await submit(bus, body)
            assert reply.status == 422 and reply.error is not None, field
            assert reply.error.code == "VALIDATION_ERROR"
            assert reply.error.details["field"] == field, reply.error
        assert [d async for d in bus.replay()] == []  # nothing is queued (Q1: before any event)


async def test_Q2_no_fit_placement_for_four_gpus_on_the_default_cluster(bus: EventBus):
    config, clock = config_with_limits(), FakeClock(10.0)
    async with running(run_intake, bus, config, clock):
        await wait_subscribed(bus)
        reply = await submit(bus, {**BODY, "num_gpus": 4})
        assert (reply.status, reply.error.code) == (422, "NO_FIT_PLACEMENT")
        reply = await submit(bus, {**BODY, "num_gpus": 1, "min_vram_gb": 40})
        assert reply.error.code == "NO_FIT_PLACEMENT"
        ok = await submit(bus, {**BODY, "num_gpus": 2, "tiers": ["rtx3080ti"]})
        assert ok.status == 201 and ok.error is None


async def test_Q3_submission_during_maintenance_is_503(bus: EventBus):
    config, clock = config_with_limits(), FakeClock(10.0)
    drain = MaintenanceChanged(event_id=new_event_id(), ts=1.0, state="DRAINING", by="root")
    await bus.append(drain)
    async with running(run_intake, bus, config, clock):
        await wait_subscribed(bus)
        reply = await submit(bus, BODY)
        assert (reply.status, reply.error.code) == (503, "SERVICE_MAINTENANCE")


async def test_Q4_Q5_fourth_job_waits_in_personal_queue_and_is_promoted_when_one_ends(
    bus: EventBus,
):
    config, clock = config_with_limits(), FakeClock(10.0)
    async with (
        Watcher(bus, config) as w,
        running(run_intake, bus, config, clock),
        running(run_dispatcher, bus, config, clock),
    ):
        await wait_subscribed(bus)
        replies = [await submit(bus, {**BODY, "name": f"j{i}"}) for i in range(4)]
        assert [r.status for r in replies] == [201] * 4
        ids = [r.job_id for r in replies]
        await w.until(lambda s: all(s.jobs.get(j) and s.jobs[j].placement for j in ids[:3]))
        await intake_has_passed(bus, w)
        assert w.state.jobs[ids[3]].state == "PERSONAL_QUEUE_WAIT"  # ConcurrencyLimit
        assert w.state.slots["alice"] == 3
        await start_job(bus, w.state, clock, ids[0])
        await w.until(lambda s: s.jobs[ids[0]].state == "RUNNING")
        clock.advance(30)
        await end_job(bus, w.state, config, clock, ids[0])
        t0 = time.monotonic()
        await w.until(lambda s: s.jobs[ids[3]].state != "PERSONAL_QUEUE_WAIT", timeout=5)
        assert time.monotonic() - t0 < 0.5  # Q5: at once, not at the next cycle
        assert w.state.jobs[ids[3]].queue_entered_at == clock.now()  # promotion time
        await w.until(lambda s: s.jobs[ids[3]].state == "DISPATCHED")


async def test_Q6_idempotency_key_replays_or_conflicts_even_across_replicas(bus: EventBus):
    config, clock = config_with_limits(), FakeClock(10.0)
    async with running(run_intake, bus, config, clock), running(run_intake, bus, config, clock):
        await wait_subscribed(bus)
        first = await submit(bus, BODY, key="k-1")
        again = await submit(bus, BODY, key="k-1")
        assert (first.status, first.replayed) == (201, False)
        assert (again.status, again.replayed, again.job_id) == (200, True, first.job_id)
        other = await submit(bus, {**BODY, "num_gpus": 2}, key="k-1")
        assert (other.status, other.error.code) == (409, "IDEMPOTENCY_CONFLICT")
        mine = await submit(bus, BODY, user="bob", key="k-1")  # keys are per user
        assert mine.status == 201 and mine.job_id != first.job_id
        # many concurrent submits with one key over two replicas: one job
        race = await asyncio.gather(*(submit(bus, BODY, key="k-race") for _ in range(8)))
        assert len({r.job_id for r in race}) == 1
        assert sorted(r.status for r in race) == [200] * 7 + [201]
    submitted = [d.event async for d in bus.replay() if isinstance(d.event, JobSubmitted)]
    assert len(submitted) == 3


async def test_Q6_a_key_whose_job_ended_is_replayed_even_during_maintenance(bus: EventBus):
    """Q6 comes before Q3: a key whose job ended and left intake's hot state (SPEC O6) is
    answered from the job's own subject of the log (a replay with its final state, or
    IDEMPOTENCY_CONFLICT for another body), also while maintenance refuses new submits. An
    accepted submit learns of a used key from its own append (expected subject sequence 0)."""
    clock = FakeClock(10.0)
    config = msgspec.structs.replace(load_config(env={}), cycle_s=0.5, min_cycle_gap_s=0.02)
    async with Watcher(bus, config) as w, running(run_intake, bus, config, clock):
        await wait_subscribed(bus)
        first = await submit(bus, BODY, key="k-end")
        assert first.status == 201 and (await cancel(bus, first.job_id)).status == 202
        async with running(run_dispatcher, bus, config, clock):  # it ends the queued job
            await w.until(lambda s: s.jobs[first.job_id].state == "CANCELLED")
        await intake_has_passed(bus, w)  # intake folded the end: the job left its hot state
        again = await submit(bus, BODY, key="k-end")
        assert (again.status, again.replayed, again.job_id) == (200, True, first.job_id)
        assert again.state == "CANCELLED"
        other = await submit(bus, {**BODY, "num_gpus": 2}, key="k-end")
        assert (other.status, other.error.code) == (409, "IDEMPOTENCY_CONFLICT")
        await bus.append(
            MaintenanceChanged(event_id=new_event_id(), ts=clock.now(), state="DRAINING", by="a")
        )
        refused = await submit(bus, BODY)  # Q3 for a new job: intake folded the change
        while refused.status == 201:
            refused = await submit(bus, BODY)
        assert (refused.status, refused.error.code) == (503, "SERVICE_MAINTENANCE")
        during = await submit(bus, BODY, key="k-end")
        assert (during.status, during.replayed, during.job_id) == (200, True, first.job_id)
    submitted = [d.event async for d in bus.replay() if isinstance(d.event, JobSubmitted)]
    assert sum(e.idempotency_key == "k-end" for e in submitted) == 1


async def test_cancel_is_idempotent_and_409_once_terminal(bus: EventBus):
    clock = FakeClock(10.0)
    config = msgspec.structs.replace(load_config(env={}), cycle_s=0.5, min_cycle_gap_s=0.02)
    async with Watcher(bus, config) as w, running(run_intake, bus, config, clock):
        await wait_subscribed(bus)
        queued = [await submit(bus, {**BODY, "name": f"q{i}"}) for i in range(4)]
        personal = queued[3].job_id  # 4th job of a default (3) user waits in the personal queue
        await w.until(lambda s: s.jobs.get(personal) is not None)
        assert w.state.jobs[personal].state == "PERSONAL_QUEUE_WAIT"
        assert (await cancel(bus, personal, by="mallory")).error.code == "FORBIDDEN"
        first = await cancel(bus, personal)
        assert (first.status, first.state) == (202, "CANCELLING")
        # no dispatcher yet: the job stays CANCELLING, so the repeat meets it there (not ended)
        second = await cancel(bus, personal)
        assert (second.status, second.replayed) == (202, True)
        async with running(run_dispatcher, bus, config, clock):
            # the dispatcher ends a queued job (nothing ran, nothing to charge)
            await w.until(lambda s: s.jobs[personal].state == "CANCELLED")
        done = await cancel(bus, personal)
        assert (done.status, done.error.code) == (409, "ALREADY_TERMINAL")
        assert (await cancel(bus, "nope")).error.code == "NOT_FOUND"


async def test_S1_per_user_limit_from_the_users_table(bus: EventBus, pool):
    await pool.execute("INSERT INTO labs (name) VALUES ('BCG')")
    await pool.execute(
        "INSERT INTO users (name, lab, role, max_active_jobs) VALUES ('erin', 'BCG', 'user', 1)"
    )
    config, clock = config_with_limits(), FakeClock(10.0)
    async with Watcher(bus, config) as w, running(run_intake, bus, config, clock, pool=pool):
        await wait_subscribed(bus)
        first = await submit(bus, BODY, user="erin")
        second = await submit(bus, {**BODY, "name": "two"}, user="erin")
        assert (first.state, second.state) == ("GLOBAL_QUEUE_WAIT", "PERSONAL_QUEUE_WAIT")
        await w.until(lambda s: s.jobs.get(second.job_id) is not None)
        await intake_has_passed(bus, w)
        assert w.state.jobs[second.job_id].state == "PERSONAL_QUEUE_WAIT"
        assert w.state.slots["erin"] == 1


def _max_slots_over_the_log(events: list, config: Config, user: str) -> int:
    """The most slots `user` ever held in any prefix of the log (S1 at every moment)."""
    from jpu.bus import Delivered
    from jpu.domain.cluster import ClusterState, evolve

    state, most = ClusterState.new(config), 0
    for i, e in enumerate(events, start=1):
        evolve(state, Delivered(i, f"x.job.{getattr(e, 'job_id', '')}", e, {}))
        most = max(most, state.slots_of(user))
    return most


async def test_S1_X8_an_oom_retry_keeps_its_slot_so_the_next_job_is_not_promoted_meanwhile(
    bus: EventBus,
):
    """SPEC S1: the OOM end freed the slot, intake promoted the user's next job, then
    the retry came back: two slot-holding jobs with max_active_jobs = 1."""
    config = msgspec.structs.replace(
        config_with_limits(),
        labs=[LabConfig(name="BCG", users=[UserConfig(name="alice", max_active_jobs=1)])],
    )
    clock = FakeClock(10.0)
    async with (
        Watcher(bus, config) as w,
        running(run_intake, bus, config, clock),
        running(run_dispatcher, bus, config, clock),
    ):
        await wait_subscribed(bus)
        fillers = [job_id() for _ in range(4)]  # every rtx4090 busy: alice lands on a 3080 Ti
        for f in fillers:
            await submit_global(bus, clock, f, "OTH", "olga", 1, tiers=["rtx4090"])
        await w.until(lambda s: all(s.jobs.get(f) and s.jobs[f].placement for f in fillers))
        first = (await submit(bus, {**BODY, "name": "big"})).job_id
        await w.until(lambda s: s.jobs.get(first) and s.jobs[first].placement)
        assert w.state.jobs[first].placement[1] == "rtx3080ti"
        second = (await submit(bus, {**BODY, "name": "next"})).job_id
        await w.until(lambda s: s.jobs.get(second) is not None)
        await start_job(bus, w.state, clock, first)
        await w.until(lambda s: s.jobs[first].state == "RUNNING")
        clock.advance(60)
        await end_job(bus, w.state, config, clock, first, final="FAILED", oom=True)
        await w.until(lambda s: s.jobs[first].attempt == 2)
        await intake_has_passed(bus, w)  # alice's end and retry, and her promotion round
        assert w.state.jobs[first].state in {"GLOBAL_QUEUE_WAIT", "RESERVING", "DISPATCHED"}
        assert w.state.jobs[second].state == "PERSONAL_QUEUE_WAIT"
        assert w.state.slots_of("alice") == 1
    assert _max_slots_over_the_log([d.event async for d in bus.replay()], config, "alice") == 1


async def test_Q5_E2_forty_concurrent_submits_of_one_user_promote_exactly_her_oldest_three(
    bus: EventBus,
):
    """Forty submits from alice (3 slots, S1) in flight at once share intake's appends and
    promotion rounds: every one is accepted once, exactly three are promoted, and they are her
    three oldest (Q5: the oldest personal-queue job first, in log order); each reply says the
    state its job is in."""
    config, clock = config_with_limits(), FakeClock(10.0)
    async with Watcher(bus, config) as w, running(run_intake, bus, config, clock):
        await wait_subscribed(bus)
        replies = await asyncio.gather(*(submit(bus, {**BODY, "name": f"c{i}"}) for i in range(40)))
        assert [r.status for r in replies] == [201] * 40
        await intake_has_passed(bus, w)  # the rounds those submits called for have run
    log = [d async for d in bus.replay()]
    submitted = [d for d in log if isinstance(d.event, JobSubmitted) and d.event.user == "alice"]
    promoted = [d.event.job_id for d in log if isinstance(d.event, JobPromoted)]
    assert len({d.event.job_id for d in submitted}) == len(submitted) == 40  # none doubled
    assert sorted(d.event.job_id for d in submitted) == sorted(r.job_id for r in replies)
    alices = {d.event.job_id for d in submitted}
    oldest = [d.event.job_id for d in submitted[:3]]  # log order is submit order (E2)
    assert sorted(j for j in promoted if j in alices) == sorted(oldest)
    states = {r.job_id: r.state for r in replies}
    assert sorted(j for j, s in states.items() if s == "GLOBAL_QUEUE_WAIT") == sorted(oldest)
    assert sum(s == "PERSONAL_QUEUE_WAIT" for s in states.values()) == 37
    assert _max_slots_over_the_log([d.event for d in log], config, "alice") == 3
