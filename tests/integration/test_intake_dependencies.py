"""Q8 crash safety on a real JetStream: the never-satisfied decision is the fold's, replayed from
the log, so two intake replicas racing on it and an intake restarted after it append each
job's end exactly once (the job subject's expected sequence, SPEC E2)."""

from __future__ import annotations

from jpu.bus import EventBus
from jpu.domain.dependencies import NEVER_SATISFIED
from jpu.events import JobEnded, JobSubmitted, new_event_id
from jpu.runtime.clock import FakeClock
from jpu.testing.crash import check_log
from jpu.testing.fold import Watcher, job_id, start_job, submit_global
from jpu.testing.intake import config_with_limits, running, submit, wait_subscribed
from jpu_services.intake.service import run_intake


def _submitted(jid: str, dependency: str | None = None) -> JobSubmitted:
    return JobSubmitted(
        event_id=new_event_id(), ts=10.0, job_id=jid, lab="BCG", user="alice", name="step",
        command="true", num_gpus=1, dependency=dependency,
    )  # fmt: skip


async def _ends(bus: EventBus, jid: str) -> list[JobEnded]:
    return [d.event for d in await bus.job_events(jid) if isinstance(d.event, JobEnded)]


async def test_Q8_never_satisfied_is_replayed_and_appended_once_by_racing_and_restarted_intakes(
    bus: EventBus,
) -> None:
    config, clock = config_with_limits(), FakeClock(20.0)
    a, b, c, d = (job_id() for _ in range(4))
    # what an earlier intake recorded: a pipeline a → b → c, and d to run if a fails
    for event in (
        _submitted(a),
        _submitted(b, f"afterok:{a}"),
        _submitted(c, f"afterok:{b}"),
        _submitted(d, f"afternotok:{a}"),
    ):
        await bus.append(event, expected_last_subject_seq=0)
    end = JobEnded(event_id=new_event_id(), ts=15.0, job_id=a, attempt=1, state="FAILED")
    await bus.append(end)
    async with (
        Watcher(bus, config) as w,
        running(run_intake, bus, config, clock),
        running(run_intake, bus, config, clock),  # a replica deciding the same at once
    ):
        await w.until(lambda s: s.jobs[c].terminal and s.jobs[d].state != "PERSONAL_QUEUE_WAIT")
        assert (w.state.jobs[b].state, w.state.jobs[c].state) == ("CANCELLED", "CANCELLED")
        assert w.state.jobs[d].state == "GLOBAL_QUEUE_WAIT"  # afternotok: a failed
    for jid in (b, c):
        ends = await _ends(bus, jid)
        assert [(e.state, e.reason) for e in ends] == [("CANCELLED", NEVER_SATISFIED)], ends

    async with Watcher(bus, config) as w, running(run_intake, bus, config, clock):  # restarted
        await wait_subscribed(bus)
        reply = await submit(bus, {"name": "late", "command": "true", "num_gpus": 1,
                                   "dependency": f"afterok:{b}"})  # fmt: skip
        assert reply.status == 201, reply
        late = str(reply.job_id)
        await w.until(lambda s: s.jobs[late].terminal)  # decided by the restarted intake
    assert [e.reason for e in await _ends(bus, late)] == [NEVER_SATISFIED]
    for jid in (b, c):  # the restart replayed them as ended: nothing appended again
        assert len(await _ends(bus, jid)) == 1
    # the crash harness' invariants (S2, O5: one end, nothing after it) for the jobs Q8 ended;
    # a and d are this test's hand-written setup (a never dispatched, d left queued)
    check = check_log([x async for x in bus.replay()], config)
    assert [v for v in check.violations if v.split(":")[0] in (b, c, late)] == []
    assert check.state.jobs[late].state == "CANCELLED"


async def test_Q8_after_is_promoted_as_soon_as_the_parent_starts_for_another_user_of_the_lab(
    bus: EventBus,
) -> None:
    config, clock = config_with_limits(), FakeClock(20.0)
    parent = job_id()
    await submit_global(bus, clock, parent, "BCG", "alice", 1)
    async with Watcher(bus, config) as w, running(run_intake, bus, config, clock):
        await wait_subscribed(bus)
        body = {"name": "after", "command": "true", "num_gpus": 1, "dependency": f"after:{parent}"}
        reply = await submit(bus, body, user="bob")
        assert reply.status == 201 and reply.state == "PERSONAL_QUEUE_WAIT", reply
        child = str(reply.job_id)
        await w.until(lambda s: s.jobs[child].waiting == [("after", parent)])
        await start_job(bus, w.state, clock, parent)  # no dispatch needed: JobStarted is the fact
        await w.until(lambda s: s.jobs[child].state == "GLOBAL_QUEUE_WAIT")  # bob was woken
