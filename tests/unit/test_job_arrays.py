"""Job arrays in the domain core (SPEC Q7): parsing, the expansion of the one submit event into
its tasks, the fold, the `%N` throttle in promotion (Q5, D7 ArrayThrottle), refusals, snapshots.
Pure: no servers, the same functions the services call."""

from __future__ import annotations

import pytest

from jpu.commands import SubmitCommand
from jpu.config import load_config
from jpu.domain import arrays
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.codec import pack, unpack
from jpu.domain.promotion import personal_reason, promoted, to_promote
from jpu.domain.submission import Submit, array_refused, checked, submitted
from jpu.events import Delivered, JobEnded, JobSubmitted, subject_for
from jpu.explain.queue_at import fold_until, queue_at
from jpu.explain.wait import wait_timeline

CONFIG = load_config(None)


def _array_submit(spec: object, job_id: str = "a1", user: str = "alice") -> JobSubmitted:
    cmd = SubmitCommand(
        user=user,
        lab="BCG",
        body={"command": "true", "num_gpus": 1, "array": spec, "env": {"MINE": "1"}},
    )
    sub = checked(cmd, {t.name: t for t in CONFIG.tiers})
    assert isinstance(sub, Submit), sub
    return submitted(sub, job_id, 10.0, "e-submit")


class _Log:
    """A log in memory: events appended in order, folded like the services fold them."""

    def __init__(self) -> None:
        self.state = ClusterState.new(CONFIG)
        self.seq = 0

    def add(self, event: object) -> None:
        self.seq += 1
        evolve(self.state, Delivered(self.seq, subject_for(event), event, {}))  # type: ignore[arg-type]

    def promote(self, now: float) -> list[str]:
        chosen = to_promote(self.state, None, {}, CONFIG.max_active_jobs)
        for jid in chosen:
            self.add(promoted(jid, now, f"p-{jid}-{now}"))
        return chosen

    def end(self, jid: str, now: float) -> None:
        self.add(JobEnded(event_id=f"end-{jid}", ts=now, job_id=jid, attempt=1, state="COMPLETED"))


@pytest.mark.parametrize(
    ("spec", "tasks", "throttle"),
    [
        ("0-3", [0, 1, 2, 3], None),
        ("0-9:3", [0, 3, 6, 9], None),
        ("1,5,9", [1, 5, 9], None),
        ("0-99%8", list(range(100)), 8),
        ("0-2,10-12:2%2", [0, 1, 2, 10, 12], 2),
        ([7, 3, 5], [3, 5, 7], None),
    ],
)
def test_Q7_array_syntax_parses_like_slurm(spec: object, tasks: list[int], throttle: int) -> None:
    a = arrays.parse(spec, 1000)
    assert a.tasks == tasks and a.throttle == throttle


@pytest.mark.parametrize(
    "spec",
    ["", "x", "5-1", "0-9:0", "0-9%0", "0-9%x", "1,1", [], [1, True], "0-1000", 5, "0" * 4097],
)
def test_Q7_malformed_or_too_large_array_refused(spec: object) -> None:
    with pytest.raises(arrays.ArrayProblem):
        arrays.parse(spec, 1000)


def test_Q7_one_submit_event_expands_into_every_task_with_its_env() -> None:
    event = _array_submit("0-4:2%2")
    tasks = arrays.tasks_of(event)
    assert [t.job_id for t in tasks] == ["a1_0", "a1_2", "a1_4"]
    t = tasks[1]
    assert t.array is not None and t.array.array_id == "a1" and t.array.tasks == [2]
    assert t.env["MINE"] == "1"  # the array's own env is every task's
    assert t.env["JPU_ARRAY_JOB_ID"] == t.env["SLURM_ARRAY_JOB_ID"] == "a1"
    assert t.env["JPU_ARRAY_TASK_ID"] == t.env["SLURM_ARRAY_TASK_ID"] == "2"
    assert arrays.tasks_of(t) == [t]  # a task is a job: it expands to itself
    assert arrays.split_task_id("a1_2") == ("a1", 2) and arrays.split_task_id("a1") is None


def test_Q7_fold_makes_each_task_a_job_whose_subject_starts_empty_E2() -> None:
    log = _Log()
    log.add(_array_submit("0-2"))
    jobs = log.state.jobs
    assert sorted(jobs) == ["a1_0", "a1_1", "a1_2"]
    assert "a1" not in jobs  # the array's id is no job
    assert list(log.state.personal["alice"]) == ["a1_0", "a1_1", "a1_2"]
    for j in jobs.values():
        assert j.state == "PERSONAL_QUEUE_WAIT" and j.array_id == "a1"
        assert j.submit_seq == 1 and j.last_seq == 0  # E2: its first append expects seq 0


def test_Q7_throttle_caps_slot_holding_tasks_and_promotes_next_eligible_job_Q5() -> None:
    log = _Log()
    limits = {"alice": 5}
    log.add(_array_submit("0-5%2"))
    single = JobSubmitted(
        event_id="e-single", ts=11.0, job_id="single", lab="BCG", user="alice", name="s",
        command="true", num_gpus=1,
    )  # fmt: skip
    log.add(single)
    chosen = to_promote(log.state, None, limits, 3)
    # %2: two tasks, then the single job behind the throttled tasks (the next eligible)
    assert chosen == ["a1_0", "a1_1", "single"]
    for jid in chosen:
        log.add(promoted(jid, 12.0, f"p-{jid}"))
    assert log.state.array_slots == {"a1": 2}
    assert to_promote(log.state, None, limits, 3) == []  # 3 of 5 slots free, all throttled
    log.end("a1_0", 13.0)
    assert log.state.array_slots == {"a1": 1}
    assert to_promote(log.state, None, limits, 3) == ["a1_2"]


def test_Q7_throttle_within_user_limit_Q5() -> None:
    log = _Log()
    log.add(_array_submit("0-9%8"))
    assert log.promote(1.0) == ["a1_0", "a1_1", "a1_2"]  # max_active_jobs 3 < %8


def test_Q7_D7_personal_reason_counts_the_tasks_promoted_at_once() -> None:
    """Right after an array's submit, before the JobPromoted intake appends: a task beyond %N
    reads ArrayThrottle once the tasks about to be promoted are counted; beyond the user's own
    slots (Q5) it stays ConcurrencyLimit."""
    log = _Log()
    log.add(_array_submit("0-3%2"))
    state = log.state
    promoting = to_promote(state, None, {}, CONFIG.max_active_jobs)
    assert promoting == ["a1_0", "a1_1"]
    assert personal_reason(state, state.jobs["a1_3"]) == "ConcurrencyLimit"  # nothing held yet
    assert personal_reason(state, state.jobs["a1_3"], promoting) == "ArrayThrottle"
    assert personal_reason(state, state.jobs["a1_0"], promoting) == "ConcurrencyLimit"
    wide = _Log()
    wide.add(_array_submit("0-9%8"))
    promoting = to_promote(wide.state, None, {}, CONFIG.max_active_jobs)  # 3 < %8
    assert personal_reason(wide.state, wide.state.jobs["a1_5"], promoting) == "ConcurrencyLimit"


def test_Q7_D7_a_task_beyond_N_reads_ArrayThrottle_in_why_and_queue_at_at_its_submit() -> None:
    """One truth (jpu.domain.promotion.personal_standing): at the submit instant of `0-3%2`,
    before intake's JobPromoted follow, `jpu why` and the queue at that moment (F5) give every
    task the same reason: a3 and a2 wait for the %2 the tasks about to be promoted take."""
    event = _array_submit("0-3%2")
    log = [Delivered(1, subject_for(event), event, {})]
    q = queue_at(fold_until(log, event.ts, CONFIG), event.ts, CONFIG)
    at_submit = {e.job_id: e.pending_reason for e in q.queue}
    assert at_submit == {
        "a1_0": "ConcurrencyLimit",
        "a1_1": "ConcurrencyLimit",
        "a1_2": "ArrayThrottle",
        "a1_3": "ArrayThrottle",
    }
    for jid in ("a1_2", "a1_3"):
        (step,) = wait_timeline(log, jid, CONFIG).steps
        assert step.pending_reason == at_submit[jid] == "ArrayThrottle", jid
        assert step.slot_holders == ["a1_0", "a1_1"]


def test_Q7_never_more_than_N_tasks_hold_slots_S1() -> None:
    log = _Log()
    log.add(_array_submit("0-19%4"))
    done: list[str] = []
    limits = {"alice": 10}
    now = 1.0
    while len(done) < 20:
        for jid in to_promote(log.state, None, limits, 3):
            log.add(promoted(jid, now, f"p-{jid}"))
        holding = [j for j in log.state.jobs.values() if j.holds_slot]
        assert len(holding) == min(4, 20 - len(done))  # %4 full while 4 tasks remain
        oldest = min(holding, key=lambda j: j.array_task or 0)
        log.end(oldest.job_id, now)
        done.append(oldest.job_id)
        now += 1
    assert done == [f"a1_{k}" for k in range(20)]


def test_Q7_refusals_name_array() -> None:
    state = ClusterState.new(CONFIG)
    for spec, max_tasks, max_queued in [("0-9", 5, 100), ("0-9", 100, 5), ("nope", 100, 100)]:
        cmd = SubmitCommand(
            user="u", lab="L", body={"command": "true", "num_gpus": 1, "array": spec}
        )
        reply = array_refused(cmd, state, max_tasks, max_queued)
        assert reply is not None and reply.status == 422 and reply.error is not None
        assert reply.error.code == "VALIDATION_ERROR" and reply.error.details["field"] == "array"
    ok = SubmitCommand(user="u", lab="L", body={"command": "true", "num_gpus": 1, "array": "0-9"})
    assert array_refused(ok, state, 10, 10) is None


def test_Q7_snapshot_keeps_array_slots() -> None:
    log = _Log()
    log.add(_array_submit("0-5%2"))
    log.promote(1.0)
    _, restored = unpack(pack(log.state, "S", 2.0), CONFIG)
    assert restored.array_slots == log.state.array_slots == {"a1": 2}
    assert restored.jobs["a1_3"].array_throttle == 2


def test_Q7_cli_groups_an_arrays_tasks_as_one_row_with_counts_per_state() -> None:
    from jpu.cli.arrays_view import group, ranges

    assert ranges([8, 0, 1, 2, 5, 7]) == "0-2,5,7-8"
    rows = [
        {"id": "single", "state": "RUNNING", "usage_charged": 1.0},
        *({"id": f"a1_{k}", "state": "COMPLETED", "usage_charged": 2.0} for k in range(3)),
        {"id": "a1_7", "state": "RUNNING", "usage_charged": 0.0},
    ]
    single, array = group(rows, "id")
    assert single == rows[0]
    assert array["id"] == "a1_[0-2,7]" and array["state"] == "RUNNING:1,COMPLETED:3"
    assert array["usage_charged"] == 6.0
    # only the rows `keep` accepts are folded (the queue keeps ranked tasks on their own)
    kept = group(rows, "id", keep=lambda r: r["state"] == "COMPLETED")
    assert [r["id"] for r in kept] == ["single", "a1_[0-2]", "a1_7"]
    throttled = [{"job_id": f"a2_{k}", "state": "PERSONAL_QUEUE_WAIT", "array_throttle": 8}
                 for k in range(100)]  # fmt: skip
    assert [r["job_id"] for r in group(throttled, "job_id")] == ["a2_[0-99%8]"]  # squeue's form


def test_Q7_why_of_a_task_starts_at_its_arrays_submit() -> None:
    from jpu.explain.wait import WaitFold

    log = _Log()
    events: list[Delivered] = []
    fold = WaitFold("a1_1", CONFIG, state=ClusterState.new(CONFIG), half_life_s=3600.0)

    def add(event: object) -> None:
        log.add(event)
        events.append(Delivered(log.seq, subject_for(event), event, {}))  # type: ignore[arg-type]
        fold.apply(events[-1])

    add(_array_submit("0-2%1"))
    add(promoted("a1_0", 11.0, "p0"))
    add(JobEnded(event_id="e0", ts=12.0, job_id="a1_0", attempt=1, state="COMPLETED"))
    add(promoted("a1_1", 12.0, "p1"))
    wait = fold.result(13.0)
    causes = [s.cause.kind for s in wait.steps if s.cause is not None]
    assert wait.job_id == "a1_1" and causes[0] == "submitted", wait.steps
    assert wait.steps[0].state == "PERSONAL_QUEUE_WAIT"
    assert causes[-1] == "promoted_slot_freed"  # a1_0 ended: its array's slot (%1) freed


def test_Q7_jpu_cancel_of_an_array_says_so() -> None:
    from jpu.cli.rest.cancel import cancelled

    array = {"id": "a1", "tasks": ["a1_0", "a1_1"], "state": "ARRAY", "cancel_grace_s": 30}
    assert cancelled([array]) == "Cancel requested for array a1 (2 tasks)"


def test_Q7_jpu_cancel_of_an_array_counts_only_the_tasks_it_hit() -> None:
    from jpu.cli.rest.cancel import cancelled

    array = {"id": "a1", "tasks": ["a1_0", "a1_1", "a1_2"], "state": "ARRAY", "cancelled": ["a1_2"]}
    assert cancelled([array]) == (
        "Cancel requested for array a1 (1 of 3 tasks); the others had ended or were being "
        "cancelled already"
    )
