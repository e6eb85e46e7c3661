"""The decisions the services take from the domain (jpu.domain.submission, .promotion,
.accounting), on a state folded from real events (SPEC Q2, Q3, Q5, Q6, S1, S2, F3–F6)."""

from __future__ import annotations

import msgspec
import pytest

from jpu.bus import Delivered
from jpu.commands import CancelCommand, SubmitCommand
from jpu.config import Node, load_config
from jpu.domain.accounting import initial_charges, owed_by, unsettled
from jpu.domain.backfill_decisions import ended, may_launch, started
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dependencies import Dependency
from jpu.domain.dispatch import cycle_events, snapshot
from jpu.domain.idle import GpuKey, Tracker
from jpu.domain.promotion import promoted, to_promote
from jpu.domain.states import (
    PENDING,
    PLACED,
    QUEUED,
    SLOT_STATES,
    STATES,
    TERMINAL,
    in_order,
    job_view,
)
from jpu.domain.submission import (
    Submit,
    cancel_answer,
    idempotent_job_id,
    refused,
    replay,
    submitted,
)
from jpu.events import (
    Event,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobSubmitted,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
    subject_for,
)
from jpu.policy import cycle
from jpu.policy.charging import usage_charged
from jpu.policy.fairshare import ZERO_USAGE
from jpu.policy.model import Gpu, LabUsage
from jpu.testing.fold import fold_events

CONFIG = load_config(env={})


def _submit(job_id: str, user: str, ts: float) -> JobSubmitted:
    return JobSubmitted(
        event_id=f"s-{job_id}", ts=ts, job_id=job_id, lab="L", user=user, name=job_id,
        command="true", num_gpus=1,
    )  # fmt: skip


def test_Q5_the_oldest_personal_jobs_are_promoted_up_to_each_users_limit() -> None:
    log: list[Event] = [_submit(j, u, t) for t, (j, u) in enumerate([
        ("a1", "ann"), ("b1", "bob"), ("a2", "ann"), ("a3", "ann"), ("b2", "bob"),
    ])]  # fmt: skip
    state = fold_events(CONFIG, log)
    assert to_promote(state, None, {"ann": 2}, 1) == ["a1", "a2", "b1"]
    assert to_promote(state, {"bob"}, {"ann": 2}, 1) == ["b1"]
    events = [promoted(j, 50.0, f"p-{j}") for j in ("a1", "a2", "b1")]
    assert all(e.queue_entered_at == 50.0 for e in events)  # Q5: the promotion time
    state = fold_events(CONFIG, [*log, *events])
    assert state.slots == {"ann": 2, "bob": 1}  # S1: global queue jobs hold slots
    assert to_promote(state, None, {"ann": 2}, 1) == []


def test_F4_an_ended_attempt_is_owed_until_its_charge_is_in_the_log() -> None:
    end = JobEnded(
        event_id="end-a1", ts=100.0, job_id="a1", attempt=1, state="COMPLETED",
        gpu_seconds_run=10.0, tflops=82.6, usage=826.0,
    )  # fmt: skip
    log: list[Event] = [_submit("a1", "ann", 0.0), end]
    state = fold_events(CONFIG, log)
    owed = owed_by(state, end.event_id)
    assert owed is not None and (owed.lab, owed.amount, owed.job_id) == ("L", 826.0, "a1")
    assert unsettled(state, [owed]) == [owed]
    charged = usage_charged(owed, ZERO_USAGE, CONFIG.half_life_s)
    state = fold_events(CONFIG, [*log, charged])
    assert owed_by(state, end.event_id) is None  # F5: charged once
    assert unsettled(state, [owed]) == []


def test_F3_a_charge_is_added_to_the_labs_usage_decayed_to_its_time() -> None:
    end = JobEnded(event_id="e", ts=100.0, job_id="a1", attempt=1, state="FAILED", usage=10.0)
    state = fold_events(CONFIG, [_submit("a1", "ann", 0.0), end])
    state.usage["L"] = LabUsage(1000.0, 0.0)
    owed = owed_by(state, "e")
    assert owed is not None
    charged = usage_charged(owed, state.usage["L"], half_life_s=100.0)
    assert (charged.event_id, charged.lab, charged.as_of) == (owed.charge_id, "L", 100.0)
    assert charged.value_after == pytest.approx(500.0 + 10.0)


def test_F6_only_a_lab_configured_with_usage_gets_an_initial_charge_once() -> None:
    config = load_config(env={"JPU_LABS": "[{name: A, usage: 5.0}, {name: B}]"})
    [c] = initial_charges(config, 7.0)
    assert (c.charge_id, c.lab, c.amount, c.at, c.reason) == ("init-A", "A", 5.0, 7.0, "initial")
    charged = usage_charged(c, ZERO_USAGE, config.half_life_s)
    assert (
        unsettled(fold_events(CONFIG, [charged]), initial_charges(config, 9.0)) == []
    )  # once ever


def _cmd(num_gpus: int = 1) -> Submit:
    """A submit past Q1 (64 GPUs is Q1's to refuse: built here to reach Q2)."""
    body = {"command": "true", "num_gpus": num_gpus}
    return Submit(SubmitCommand(user="ann", lab="L", body=body, idempotency_key="k1"), Dependency())


def test_Q6_a_key_names_one_job_and_a_different_body_conflicts() -> None:
    jid = idempotent_job_id("ann", "k1")
    assert jid == idempotent_job_id("ann", "k1") != idempotent_job_id("bob", "k1")
    first = submitted(_cmd(), jid, 0.0, "e1")
    state = fold_events(CONFIG, [first])
    known = state.jobs[jid]
    again = replay(known.digest, submitted(_cmd(), jid, 9.0, "e2"), known.submit_seq, known.state)
    assert (again.status, again.job_id, again.replayed) == (200, jid, True)
    other = replay(known.digest, submitted(_cmd(2), jid, 9.0, "e3"), 1, known.state)
    assert other.status == 409 and other.error and other.error.code == "IDEMPOTENCY_CONFLICT"


def test_Q2_Q3_maintenance_refuses_first_then_a_job_no_placement_can_ever_run() -> None:
    tiers = {t.name: t for t in CONFIG.tiers}
    fits, never = submitted(_cmd(1), "j1", 0.0, "e1"), submitted(_cmd(64), "j2", 0.0, "e2")
    state = fold_events(CONFIG, [])
    assert refused(state, _cmd(1), fits, tiers) is None
    no_fit = refused(state, _cmd(64), never, tiers)
    assert no_fit and no_fit.error and no_fit.error.code == "NO_FIT_PLACEMENT"
    m = MaintenanceChanged(event_id="m", ts=1.0, state="DRAINING", by="admin", message="nfs")
    down = refused(fold_events(CONFIG, [m]), _cmd(1), fits, tiers)
    assert down and down.status == 503 and down.error and down.error.code == "SERVICE_MAINTENANCE"


def test_S2_an_ended_job_is_not_cancelled_but_a_pending_OOM_retry_is() -> None:
    by_owner = CancelCommand(job_id="a1", by="ann")
    oom = JobEnded(event_id="x", ts=5.0, job_id="a1", attempt=1, state="FAILED", oom=True)
    done = JobEnded(event_id="y", ts=5.0, job_id="a1", attempt=1, state="COMPLETED")
    pending = fold_events(CONFIG, [_submit("a1", "ann", 0.0), oom]).jobs["a1"]
    assert cancel_answer(by_owner, pending) is None  # X8: the retry can be called off
    ended = fold_events(CONFIG, [_submit("a1", "ann", 0.0), done]).jobs["a1"]
    refusal = cancel_answer(by_owner, ended)
    assert refusal and refusal.error and refusal.error.code == "ALREADY_TERMINAL"
    stranger = cancel_answer(CancelCommand(job_id="a1", by="eve"), pending)
    assert stranger and stranger.error and stranger.error.code == "FORBIDDEN"
    asked = JobCancelRequested(event_id="c", ts=1.0, job_id="a1", by="ann")
    cancelling = fold_events(CONFIG, [_submit("a1", "ann", 0.0), asked]).jobs["a1"]
    again = cancel_answer(by_owner, cancelling)
    assert again and (again.status, again.replayed) == (202, True)


def test_S3_a_job_is_the_fold_of_its_own_events_from_its_submission_on() -> None:
    asked = JobCancelRequested(event_id="c", ts=1.0, job_id="a1", by="ann")
    own = [
        Delivered(s, subject_for(e), e, {}) for s, e in ((7, _submit("a1", "ann", 0.0)), (9, asked))
    ]
    job = job_view(own)
    assert job is not None
    assert (job.submit_seq, job.state, job.cancel_by) == (7, "CANCELLING", "ann")
    assert job_view(own[1:]) is None  # no submission: no such job


def test_B2_M2_a_planned_backfill_start_launches_only_while_its_gpu_is_idle_and_allowed() -> None:
    state = fold_events(CONFIG, [])
    tracker = Tracker(state)
    tracker.refresh(0.0, 0)
    key: GpuKey = ("gpu-4090x2-01", "rtx4090", 0)
    planned = tracker.idle[key]
    assert may_launch(tracker, key, planned)
    log: list[Event] = [
        _submit("a1", "ann", 1.0),
        promoted("a1", 1.0, "p"),
        JobDispatched(event_id="d", ts=2.0, job_id="a1", attempt=1, node=key[0], tier=key[1],
                      gpus=[0]),
    ]  # fmt: skip
    for i, e in enumerate(log, start=1):
        evolve(state, Delivered(i, subject_for(e), e, {}))
        tracker.on_event(Delivered(i, subject_for(e), e, {}))
    assert not may_launch(tracker, key, planned)  # B2: the dispatch took the GPU
    other: GpuKey = ("gpu-4090x2-01", "rtx4090", 1)
    assert may_launch(tracker, other, tracker.idle[other])
    m = MaintenanceChanged(event_id="m", ts=3.0, state="BACKFILL_RECOVERY", by="d", message="")
    evolve(state, Delivered(len(log) + 1, subject_for(m), m, {}))
    assert not may_launch(tracker, other, tracker.idle[other])  # M2: no new backfill


def test_B1_an_instance_is_recorded_under_ids_that_follow_from_its_backfill_id() -> None:
    gpu = Gpu("gpu-4090x2-01", "rtx4090", 1, "free")
    start = started("bf-1", gpu, "slurm-7", "http://n:8000/v1", 5.0)
    assert (start.event_id, start.node, start.gpu, start.backend_job_id) == (
        "bf-1-started", "gpu-4090x2-01", 1, "slurm-7",
    )  # fmt: skip
    end = ended(start, "preempted", 9.0)
    assert (end.event_id, end.backfill_id, end.gpu, end.reason) == ("bf-1-ended", "bf-1", 1,
                                                                    "preempted")  # fmt: skip


def test_S1_S2_the_state_sets_are_one_partition_of_the_lifecycle() -> None:
    assert {"GLOBAL_QUEUE_WAIT", "RESERVING", "DISPATCHED", "RUNNING", "CANCELLING"} == SLOT_STATES
    assert {"COMPLETED", "FAILED", "CANCELLED"} == TERMINAL
    assert QUEUED | {"PERSONAL_QUEUE_WAIT"} == PENDING and SLOT_STATES == QUEUED | PLACED
    assert set(STATES) == PENDING | PLACED | TERMINAL and len(STATES) == 9
    assert not (PENDING & PLACED or PLACED & TERMINAL or PENDING & TERMINAL)
    assert in_order(TERMINAL | {"PERSONAL_QUEUE_WAIT"}) == (
        "PERSONAL_QUEUE_WAIT", "COMPLETED", "FAILED", "CANCELLED",
    )  # fmt: skip


def test_R5_F5_a_shrink_and_a_release_in_one_cycle_charge_every_gpu_second_once():
    """The dispatcher's log of one cycle in which rank 1 loses a reserved GPU (R5 shrink) and
    dispatches on the rest (D3.b): the shrink lands before the release, so the fold carries both
    GPUs' held time to the attempt's end (F4, F5). The other way round the fold dropped the
    shrink after the release and the lost GPU's 100 s were never charged. (R6 yield: the same
    shrink, decided in the same phase, before the walk may release the rest.)"""
    big = msgspec.structs.replace(CONFIG.tier("rtx4090"), max_gpus=4)
    config = msgspec.structs.replace(
        CONFIG, tiers=[big], nodes=[Node(name="n4", gpus={"rtx4090": 4})], labs=[]
    )
    x = msgspec.structs.replace(_submit("X", "u", 0.0), num_gpus=3)
    log: list[Event] = [
        NodeInventoryObserved(event_id="i0", ts=0.0, node="n4", gpus={"rtx4090": 4}, down={}),
        x,
        JobPromoted(event_id="p-X", ts=0.0, job_id="X", queue_entered_at=0.0),
        ReservationStarted(
            event_id="r-X", ts=0.0, job_id="X", node="n4", tier="rtx4090", gpus=[0, 1]
        ),
        NodeInventoryObserved(
            event_id="i1", ts=100.0, node="n4", gpus={"rtx4090": 4}, down={"rtx4090": [1]}
        ),
    ]
    state = ClusterState.new(config)
    for i, e in enumerate(log, start=1):
        evolve(state, Delivered(i, subject_for(e), e, {}))
    tiers = {t.name: t for t in config.tiers}
    got = cycle_events(cycle(snapshot(state, config), 100.0), tiers, 100.0)
    assert [type(e) for e in got] == [ReservationShrunk, ReservationReleased, JobDispatched]
    for i, e in enumerate(got, start=len(log) + 1):
        evolve(state, Delivered(i, subject_for(e), e, {}))
    job = state.jobs["X"]
    assert (job.state, job.reservation) == ("DISPATCHED", None)
    assert job.uncharged_reserved_gpu_s == pytest.approx(200.0)  # GPU 0 and the lost GPU 1
