"""Dependencies (SPEC Q8) and holds (Q9), decided in the domain core on the fold of the log:
each kind, the never-satisfied end, singleton, hold/release, promotion skipping a waiting job to
the next eligible one, and the same decision after a snapshot (replay)."""

from __future__ import annotations

from itertools import count
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from jpu.bus import Delivered
from jpu.cli.why import render
from jpu.commands import CommandReply, SubmitCommand
from jpu.config import Cluster, load_config
from jpu.domain import codec
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dependencies import (
    NEVER_SATISFIED,
    ArrayProgress,
    array_verdict,
    parse,
    parsed,
    verdict,
)
from jpu.domain.promotion import never_satisfied, personal_reason, to_promote
from jpu.domain.states import request_digest
from jpu.domain.submission import Submit, checked, refused, submitted
from jpu.events import (
    Event,
    JobArray,
    JobDispatched,
    JobEnded,
    JobHeld,
    JobPromoted,
    JobReleased,
    JobRetryDeclined,
    JobStarted,
    JobSubmitted,
    decode,
    encode,
    new_event_id,
)
from jpu.explain.wait import wait_timeline


class Log:
    def __init__(self) -> None:
        self.state = ClusterState(keep_ended=False)  # as services fold (SPEC O6)
        self.seq = count(1)

    def add(self, cls: type[Event], /, **kw: Any) -> None:
        event = cls(event_id=new_event_id(), ts=float(self.state.seq), **kw)
        evolve(self.state, Delivered(seq=next(self.seq), subject="s", event=event, headers={}))

    def submit(self, jid: str, user: str = "ann", **kw: Any) -> None:
        fields: dict[str, Any] = {"name": "job", "command": "true", "num_gpus": 1, **kw}
        self.add(JobSubmitted, job_id=jid, lab="L", user=user, **fields)

    def run(self, jid: str) -> None:
        self.add(JobPromoted, job_id=jid, queue_entered_at=0.0)
        self.add(JobDispatched, job_id=jid, attempt=1, node="n", tier="t", gpus=[0])
        self.add(JobStarted, job_id=jid, attempt=1, backend_job_id="b")

    def end(self, jid: str, state: str, **kw: Any) -> None:
        self.add(JobEnded, job_id=jid, attempt=1, state=state, **kw)

    def promote(self, limit: int = 1) -> list[str]:
        return to_promote(self.state, None, {}, limit)


def test_Q8_parse_normalises_slurm_syntax_and_refuses_what_it_cannot_honour() -> None:
    d = parse("afterok:a1:a2,afterany:b1,singleton")
    assert d.conditions == (("afterok", "a1"), ("afterok", "a2"), ("afterany", "b1"))
    assert d.singleton and d.text() == "afterok:a1:a2,afterany:b1,singleton"
    for bad in ("", "afterok", "afterok:", "afterburn:1", "afterok:1?afterany:2", "after:a b"):
        with pytest.raises(ValueError):
            parse(bad)


_PART = st.one_of(
    st.just("singleton"),
    st.builds(
        lambda kind, ids: f"{kind}:{':'.join(ids)}",
        st.sampled_from(["after", "afterany", "afterok", "afternotok"]),
        st.lists(st.sampled_from(["1", "2", "3", "4_0", "a-b"]), min_size=1, max_size=3),
    ),
)


@given(st.lists(_PART, min_size=1, max_size=6))
def test_Q8_what_a_submit_decides_on_is_what_its_logged_text_reads_back(parts: list[str]) -> None:
    """Intake reads the dependency once and decides on that struct; the log keeps its text
    (`Dependency.text`), which every fold reads back (`parsed`): the same conditions, in the
    same order, so a refusal names the parent a replay of the text would name."""
    read = parse(",".join(parts))
    assert parsed(read.text()) == read
    assert parse(read.text()).text() == read.text()


def test_Q8_a_submit_is_refused_naming_its_first_unknown_parent_in_the_logged_order() -> None:
    log = Log()
    log.submit("x1")
    config = load_config(env={})
    tiers = {t.name: t for t in config.tiers}
    body = {"command": "true", "num_gpus": 1, "dependency": "afterok:x1,afterany:y,afterok:z"}
    sub = checked(SubmitCommand(user="ann", lab="L", body=body), tiers)
    assert isinstance(sub, Submit)
    event = submitted(sub, "j9", 1.0, "e9")
    assert event.dependency == "afterok:x1:z,afterany:y"  # the wire format, as before
    reply = refused(log.state, sub, event, tiers)
    assert reply is not None and reply.error is not None
    assert reply.error.details["field"] == "dependency" and "no job z" in reply.error.message
    bad = checked(SubmitCommand(user="ann", lab="L", body={**body, "dependency": "afterok"}), tiers)
    assert isinstance(bad, CommandReply) and bad.error is not None
    assert bad.error.details["field"] == "dependency"  # Q1: the syntax, before any event


@pytest.mark.parametrize(
    ("kind", "started", "final", "expected"),
    [
        ("after", False, None, "wait"),
        ("after", True, None, "met"),
        ("after", False, "CANCELLED", "met"),
        ("afterany", True, None, "wait"),
        ("afterany", True, "FAILED", "met"),
        ("afterok", True, "COMPLETED", "met"),
        ("afterok", True, "FAILED", "never"),
        ("afterok", False, "CANCELLED", "never"),
        ("afternotok", True, "FAILED", "met"),
        ("afternotok", False, "CANCELLED", "met"),
        ("afternotok", True, "COMPLETED", "never"),
    ],
)
def test_Q8_each_kind_of_dependency(kind: str, started: bool, final: str, expected: str) -> None:
    assert verdict(kind, started, final) == expected


def test_Q8_afterok_waits_without_a_slot_and_the_next_eligible_job_is_promoted() -> None:
    log = Log()
    log.submit("a")
    log.submit("b", dependency="afterok:a")
    log.submit("c")
    assert log.promote(limit=5) == ["a", "c"]  # Q5 skips b: it holds no slot while it waits
    log.run("a")
    log.add(JobPromoted, job_id="c", queue_entered_at=0.0)
    b = log.state.jobs["b"]
    assert personal_reason(log.state, b) == "Dependency"  # D7
    assert log.promote(limit=5) == []
    log.end("a", "COMPLETED")
    assert personal_reason(log.state, b) == "ConcurrencyLimit"
    assert log.promote(limit=5) == ["b"]


def test_Q8_after_is_met_once_the_parent_started() -> None:
    log = Log()
    log.submit("a")
    log.submit("b", dependency="after:a")
    assert log.promote(limit=5) == ["a"]
    log.run("a")
    assert log.promote(limit=5) == ["b"]


def test_Q8_afterok_on_a_failed_parent_is_never_satisfied_and_cascades() -> None:
    log = Log()
    log.submit("a")
    log.submit("b", dependency="afterok:a")
    log.submit("c", dependency="afterok:b")
    log.run("a")
    log.end("a", "FAILED", exit_code=1)
    assert never_satisfied(log.state, None) == ["b"]  # c waits on b, which is not ended yet
    log.add(JobEnded, job_id="b", attempt=1, state="CANCELLED", reason=NEVER_SATISFIED)
    assert never_satisfied(log.state, None) == ["c"]
    assert "b" not in log.state.jobs  # ended for good, its outcome remembered for children
    assert log.state.finals["b"] == ("L", "CANCELLED", False)


def test_Q8_afternotok_on_a_completed_parent_is_never_satisfied() -> None:
    log = Log()
    log.submit("a")
    log.run("a")
    log.end("a", "COMPLETED")
    log.submit("b", dependency="afternotok:a")  # the parent ended before: decided at submit
    log.submit("c", dependency="afterany:a")
    assert never_satisfied(log.state, None) == ["b"]
    assert log.promote(limit=5) == ["c"]


def test_Q8_an_oom_pending_parent_is_not_final_until_the_retry_is_decided() -> None:
    log = Log()
    log.submit("a")
    log.submit("b", dependency="afternotok:a")
    log.run("a")
    log.end("a", "FAILED", oom=True)  # X8: a retry may still complete it
    assert log.promote(limit=5) == [] and never_satisfied(log.state, None) == []
    log.add(JobRetryDeclined, job_id="a", attempt=1, reason="no_fit", needed_vram_gb=99)
    assert log.promote(limit=5) == ["b"]


def test_Q8_unknown_parent_is_never_satisfied_rather_than_waiting_forever() -> None:
    log = Log()
    log.submit("b", dependency="afterok:nosuchjob")
    assert never_satisfied(log.state, None) == ["b"]


def test_Q8_singleton_one_slot_holding_job_per_user_and_name() -> None:
    log = Log()
    log.submit("s1", name="train", dependency="singleton")
    log.submit("s2", name="train", dependency="singleton")
    log.submit("x", name="train", user="bob", dependency="singleton")  # another user's name
    assert log.promote(limit=5) == ["s1", "x"]
    log.run("s1")
    assert personal_reason(log.state, log.state.jobs["s2"]) == "Dependency"
    assert log.promote(limit=5) == ["x"]  # bob's job of that name is not ann's
    log.add(JobPromoted, job_id="x", queue_entered_at=0.0)
    log.end("s1", "FAILED", exit_code=1)  # singleton waits for the end, whatever it was
    assert log.promote(limit=5) == ["s2"]


def test_Q9_a_held_job_waits_with_reason_held_and_the_next_job_is_promoted() -> None:
    log = Log()
    log.submit("a", hold=True)
    log.submit("b")
    assert personal_reason(log.state, log.state.jobs["a"]) == "Held"
    assert log.promote(limit=1) == ["b"]
    log.add(JobPromoted, job_id="b", queue_entered_at=0.0)
    log.add(JobReleased, job_id="a", by="ann")
    assert log.promote(limit=2) == ["a"]
    log.add(JobHeld, job_id="a", by="ann")
    assert log.promote(limit=2) == []


def test_Q9_hold_applies_only_in_the_personal_queue() -> None:
    log = Log()
    log.submit("a")
    log.add(JobPromoted, job_id="a", queue_entered_at=0.0)
    log.add(JobHeld, job_id="a", by="ann")
    assert not log.state.jobs["a"].held


def test_Q8_Q9_a_snapshot_restores_the_same_decisions() -> None:
    log = Log()
    log.submit("a")
    log.submit("b", dependency="afterok:a")
    log.submit("h", hold=True)
    log.submit("s", name="x", dependency="singleton")
    log.submit("d")
    log.run("d")
    log.end("d", "COMPLETED")
    data = codec.pack(log.state, "JPU", 0.0)
    _, restored = codec.unpack(data, Cluster(tiers=[], nodes=[]))
    restored.keep_ended = False
    assert restored.finals == log.state.finals
    assert {p: list(c) for p, c in restored.dependents.items()} == {
        p: list(c) for p, c in log.state.dependents.items()
    }  # the same children in the same order (a dict's == would not compare the order)
    assert to_promote(restored, None, {}, 5) == log.promote(limit=5)
    for s in (log.state, restored):  # the same parent end decides the same for both
        evolve(s, Delivered(seq=100, subject="s", event=_end("a"), headers={}))
    assert never_satisfied(restored, None) == never_satisfied(log.state, None) == ["b"]


def _end(jid: str) -> JobEnded:
    return JobEnded(event_id="e", ts=1.0, job_id=jid, attempt=1, state="CANCELLED")


def test_D7_why_explains_dependency_and_held_in_the_personal_queue() -> None:
    cluster = Cluster(tiers=[], nodes=[])
    log: list[Delivered] = []

    def add(cls: type[Event], **kw: Any) -> None:
        seq = len(log) + 1
        event = cls(event_id=f"e{seq}", ts=float(seq), **kw)
        log.append(Delivered(seq=seq, subject="s", event=event, headers={}))

    job = {"lab": "L", "user": "ann", "name": "j", "command": "true", "num_gpus": 1}
    add(JobSubmitted, job_id="a", **job)
    add(JobSubmitted, job_id="b", dependency="afterok:a", **job)
    add(JobHeld, job_id="b", by="ann")
    add(JobReleased, job_id="b", by="ann")
    wait = msgspec.to_builtins(wait_timeline(log, "b", cluster))
    assert [s["pending_reason"] for s in wait["steps"]] == ["Dependency", "Held", "Dependency"]
    text = render(wait, "en")
    assert "it waits for the jobs it depends on" in text and "jpu release ID" in text, text


def test_E1_Q8_job_submitted_v3_carries_dependency_and_hold_and_v2_still_decodes() -> None:
    kw: dict[str, Any] = {"event_id": "e", "ts": 1.0, "job_id": "j", "lab": "L", "user": "u",
                          "name": "n", "command": "c", "num_gpus": 1, "chdir": "/p"}  # fmt: skip
    event = JobSubmitted(**kw, dependency="afterok:a", hold=True)
    assert event.schema_version >= 3 and decode(encode(event)) == event  # v3 and after
    old = decode(msgspec.json.encode({"type": "JobSubmitted", "schema_version": 2, **kw}))
    assert isinstance(old, JobSubmitted) and (old.dependency, old.hold) == (None, False)
    # Q6: a v2 body's digest is unchanged; a dependency or a hold makes another body
    assert request_digest(old) == request_digest(JobSubmitted(**kw))
    assert request_digest(event) != request_digest(old)


def test_Q8_finals_are_bounded_oldest_first_and_survive_a_snapshot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import jpu.domain.cluster as cluster

    monkeypatch.setattr(cluster, "MAX_FINALS", 3)
    log = Log()
    for i in range(5):
        log.submit(f"p{i}")
        log.end(f"p{i}", "COMPLETED")
    assert list(log.state.finals) == ["p2", "p3", "p4"]
    _, restored = codec.unpack(codec.pack(log.state, "JPU", 0.0), Cluster(tiers=[], nodes=[]))
    assert list(restored.finals) == ["p2", "p3", "p4"]
    log.submit("late", dependency="afterok:p0")  # forgotten: never met (intake refuses it)
    assert never_satisfied(log.state, None) == ["late"]


@pytest.mark.parametrize(
    ("kind", "started", "ended", "completed", "expected"),
    [
        ("after", 2, 0, 0, "wait"),
        ("after", 3, 1, 1, "met"),  # every task started (Slurm: none pending)
        ("afterany", 3, 2, 2, "wait"),
        ("afterany", 3, 3, 1, "met"),
        ("afterok", 3, 2, 2, "wait"),
        ("afterok", 3, 3, 3, "met"),
        ("afterok", 2, 1, 0, "never"),  # one task failed: never all ok, known at once
        ("afternotok", 3, 2, 1, "wait"),  # Slurm waits for every task to end
        ("afternotok", 3, 3, 2, "met"),
        ("afternotok", 3, 3, 3, "never"),
    ],
)
def test_Q8_each_kind_of_dependency_on_a_whole_array(
    kind: str, started: int, ended: int, completed: int, expected: str
) -> None:
    p = ArrayProgress("A", "L", total=3, started=started, ended=ended, completed=completed)
    assert array_verdict(kind, p) == expected


def _submit_array(log: Log, jid: str, n: int, **kw: Any) -> None:
    log.submit(jid, array=JobArray(tasks=list(range(n)), spec=f"0-{n - 1}"), **kw)


def test_Q8_afterok_on_an_array_waits_for_every_task_then_is_promoted() -> None:
    log = Log()
    _submit_array(log, "A", 3)
    log.submit("b", dependency="afterok:A")  # the array's id: all its tasks
    b = log.state.jobs["b"]
    assert b.never is None and personal_reason(log.state, b) == "Dependency"
    for k in range(3):
        assert "b" not in log.promote(limit=5)
        log.run(f"A_{k}")
        log.end(f"A_{k}", "COMPLETED")
    assert "A" not in log.state.arrays and log.state.finals["A"] == ("L", "COMPLETED", True)
    assert personal_reason(log.state, b) == "ConcurrencyLimit"
    assert log.promote(limit=5) == ["b"]
    log.submit("c", dependency="afterok:A")  # after the array ended: remembered
    assert log.promote(limit=5) == ["b", "c"]


def test_Q8_afterok_on_an_array_is_never_satisfied_once_a_task_fails() -> None:
    log = Log()
    _submit_array(log, "A", 3)
    log.submit("b", dependency="afterok:A")
    log.submit("n", dependency="afternotok:A")
    log.run("A_1")
    log.end("A_1", "FAILED", exit_code=1)
    assert never_satisfied(log.state, None) == ["b"]  # at once, the other tasks still run
    assert log.state.jobs["n"].waiting == [("afternotok", "A")]  # Slurm: until every task ended
    for k in (0, 2):
        log.run(f"A_{k}")
        log.end(f"A_{k}", "COMPLETED")
    assert log.state.jobs["n"].waiting == [] and log.state.jobs["n"].never is None


def test_Q8_after_on_an_array_is_met_once_every_task_started() -> None:
    log = Log()
    _submit_array(log, "A", 2)
    log.submit("b", dependency="after:A")
    log.run("A_0")
    assert log.state.jobs["b"].waiting == [("after", "A")]
    log.add(JobEnded, job_id="A_1", attempt=1, state="CANCELLED")  # ended without starting
    assert log.state.jobs["b"].waiting == []


def test_Q8_array_progress_survives_a_snapshot() -> None:
    log = Log()
    _submit_array(log, "A", 2)
    log.submit("b", dependency="afterok:A")
    log.run("A_0")
    log.end("A_0", "COMPLETED")
    _, restored = codec.unpack(codec.pack(log.state, "JPU", 0.0), Cluster(tiers=[], nodes=[]))
    restored.keep_ended = False
    assert restored.arrays == log.state.arrays
    for s in (log.state, restored):
        evolve(s, Delivered(seq=100, subject="s", event=_end("A_1"), headers={}))
    assert never_satisfied(restored, None) == never_satisfied(log.state, None) == ["b"]


def test_Q8_dependents_of_a_large_array_fold_in_linear_time() -> None:
    """Every task of an array waiting on one parent joins the parent's dependents through an
    ordered set (a dict's keys: O(1) a task, not a scan of the tasks already there), in the
    order they began to wait; a job with two conditions on one parent is there once. The cost
    itself is measured by bench/bench_fold_dependents.py, not timed here."""
    log = Log()
    log.submit("p")
    _submit_array(log, "A", 2_000, dependency="afterok:p")
    log.submit("x", dependency="afterok:p,afterany:p")
    children = log.state.dependents["p"]
    assert type(children) is dict
    assert list(children) == [f"A_{k}" for k in range(2_000)] + ["x"]
    assert log.state.jobs["x"].waiting == [("afterok", "p"), ("afterany", "p")]
    log.run("p")
    log.end("p", "COMPLETED")
    assert "p" not in log.state.dependents
    assert log.promote(limit=3) == ["A_0", "A_1", "A_2"]  # released in the order they waited
    assert all(log.state.jobs[f"A_{k}"].waiting == [] for k in range(2_000))
    assert log.state.jobs["x"].waiting == [] and log.state.jobs["x"].never is None


def test_Q5_Q8_a_job_leaves_a_long_personal_queue_without_a_scan_and_the_order_stays() -> None:
    """A personal queue is an ordered set (a dict's keys): jobs promoted past an array waiting
    on its dependency leave it in O(1) each, and the order (oldest first, Q5) is kept."""
    log = Log()
    log.submit("p", user="bob")
    _submit_array(log, "A", 1_000, dependency="afterok:p")
    for k in range(3):
        log.submit(f"s{k}")
    queue = log.state.personal["ann"]
    assert type(queue) is dict
    assert to_promote(log.state, {"ann"}, {}, 2) == ["s0", "s1"]  # past the waiting tasks
    log.add(JobPromoted, job_id="s1", queue_entered_at=0.0)
    assert list(log.state.personal["ann"]) == [f"A_{k}" for k in range(1_000)] + ["s0", "s2"]
