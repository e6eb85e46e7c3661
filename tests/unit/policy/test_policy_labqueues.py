"""The queue kept grouped by lab (LabQueues) and the lazy pending reasons (Pending): the same
D1 order and D7 reasons as the flat queue, whatever sequence of puts and removals built it."""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jpu.policy import cycle
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import LabUsage, QueuedJob, Reservation
from jpu.policy.pending import Pending
from jpu.testing.policy_builders import SETTINGS, cluster, job, snap, snapshots
from jpu.testing.policy_reference import ref_cycle


def _entry(j: QueuedJob) -> tuple[float, str]:
    return (j.queue_entered_at, j.job_id)


@SETTINGS
@given(snapshots())
def test_D1_D3_D7_cycle_on_lab_queues_equals_literal_reading(case):
    s, now = case
    grouped = msgspec.structs.replace(s, queue=LabQueues(s.queue))
    assert cycle(grouped, now) == ref_cycle(s, now)


ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "put", "put", "discard"]),
        st.integers(0, 12),  # job id
        st.sampled_from("ABC"),  # lab
        st.integers(0, 4),  # queue_entered_at
        st.integers(1, 3),  # num_gpus
        st.booleans(),  # tiers filter
        st.booleans(),  # reservation
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_D1_lab_queues_stay_in_entry_order_under_any_updates(steps):
    lq, model = LabQueues(), {}
    for op, k, lab, entered, n, tf, res in steps:
        jid = f"j{k}"
        if op == "discard":
            assert lq.discard(jid) == model.pop(jid, None)
            continue
        j = QueuedJob(
            job_id=jid,
            lab=lab,
            user="u",
            num_gpus=n,
            queue_entered_at=float(entered),
            tiers=frozenset({"t0"}) if tf else None,
            reservation=Reservation("n0", "t0", (0,), 0.0) if res else None,
        )
        lq[jid] = j
        model[jid] = j
    assert len(lq) == len(model) and sorted(lq, key=_entry) == sorted(model.values(), key=_entry)
    assert set(lq.holders) == {j for j, q in model.items() if q.reservation is not None}
    for lab, q in lq.labs.items():
        assert q.jobs == sorted((j for j in model.values() if j.lab == lab), key=_entry)
        assert q.ids == [j.job_id for j in q.jobs]
        assert q.keys == [_entry(j) for j in q.jobs]
        assert q.cids == [lq.class_id(j) for j in q.jobs]
    assert all(len(q) for q in lq.labs.values()), "no empty lab is kept"
    # the classes present (LabView.present) counted as jobs come and go, a class changing in place
    assert lq.class_count == dict(Counter(lq.class_id(j) for j in model.values()))


def test_D1_lab_queues_dict_like_access():
    a = job("a", "A", 1, 2.0)
    lq = LabQueues([a])
    assert "a" in lq and lq["a"] is a and lq.get("b") is None and list(lq.values()) == [a]
    with pytest.raises(ValueError):
        lq["b"] = a
    del lq["a"]
    with pytest.raises(KeyError):
        del lq["a"]
    assert len(lq) == 0 and not lq.labs


def test_D1_equal_usage_labs_interleave_by_entry_on_lab_queues():
    q = [job("a1", "A", 1, 1), job("a2", "A", 1, 3), job("b1", "B", 1, 2)]
    q.append(job("c1", "C", 1, 0))
    s = snap([], q, {"C": 10.0})
    r = cycle(msgspec.structs.replace(s, queue=LabQueues(q)), 0)
    assert r.order == ["a1", "b1", "a2", "c1"]  # A and B both at 0 (F6), C above


def test_D7_pending_reads_like_a_dict():
    p = Pending(["x", "y", "z", "w"], [2, 1, 2, 1], {1: "Priority", 2: "Resources"}, {1})
    assert p == {"x": "Resources", "z": "Resources", "w": "Priority"}
    assert list(p) == ["x", "z", "w"] and len(p) == 3  # rank order, dispatched left out
    assert "y" not in p and "nope" not in p and p.get("y") is None
    with pytest.raises(KeyError):
        p["y"]
    assert p["w"] == "Priority" and p.reason_at(1) is None and p.reason_at(3) == "Priority"
    assert dict(p.items()) == dict(p) == {"x": "Resources", "z": "Resources", "w": "Priority"}
    first = Pending(["x", "y"], [2, 2], {2: "Resources"}, (), "Reservation")
    assert dict(first.items()) == {"x": "Reservation", "y": "Resources"} and first["x"]
    assert Pending([], [], {}) == {} and repr(Pending([], [], {})) == "Pending({})"


def test_D7_cycle_pending_on_lab_queues_matches_flat():
    gpus = cluster(("n0", "rtx4090", 2))
    q = [job("big", "A", 4, 0), job("one", "B", 1, 1), job("two", "B", 2, 2)]
    q.append(job("three", "B", 1, 3))
    s = snap(gpus, q, {"A": 0.0, "B": LabUsage(5.0, 0.0)})
    flat, grouped = cycle(s, 0), cycle(msgspec.structs.replace(s, queue=LabQueues(q)), 0)
    assert flat == grouped and dict(grouped.pending.items()) == dict(flat.pending)
