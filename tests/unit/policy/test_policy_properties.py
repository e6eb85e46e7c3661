"""Property tests (hypothesis): the optimised cycle equals the literal reading of D3, and the
invariants of §1.2, §3 and §4 hold over many cycles on random small clusters and queues."""

from __future__ import annotations

import random

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jpu.policy import cycle
from jpu.policy.model import Gpu, LabUsage, QueuedJob, Reservation, Snapshot
from jpu.testing.policy_builders import LABS, SETTINGS, snapshots, tier
from jpu.testing.policy_invariants import check_invariants
from jpu.testing.policy_reference import ref_cycle
from jpu.testing.policy_sim import Sim


@SETTINGS
@given(snapshots())
def test_D3_cycle_equals_literal_reading(case):
    snap, now = case
    assert cycle(snap, now) == ref_cycle(snap, now)


MODES = ["strict", "useful", "hysteresis", "damped", "yield"]


@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(snapshots())
def test_invariants_single_cycle(mode, case):
    snap, now = case
    snap = msgspec.structs.replace(snap, reservation_demotion=mode)
    check_invariants(snap, cycle(snap, now), now)


def test_R6_damped_a_parked_swap_then_rank1_leaves_no_class_alive_without_a_slot():
    """Found by the property test above (the cycle asserted): j1, parked on n3/t0, swaps to n2/t1
    and gives its two GPUs back mid-walk; rank 1 (j3, t0 only) then takes n3's; the walk still
    counted the 1-GPU class as servable and found no placement for it. Every dispatcher cycle
    with such a queue would have failed."""
    t0, t1 = tier("t0", 12, 10.0, 0, max_gpus=3), tier("t1", 12, 10.0, 0, max_gpus=3)
    t2 = tier("t2", 12, 10.0, 0, max_gpus=1)
    layout = [
        ("n0", "t0", ["reserved:j0", "free", "job:r0t02", "job:r0t03"]),
        ("n1", "t1", ["free"]),
        ("n1", "t0", ["free", "job:r1t01", "job:r1t02"]),
        ("n2", "t1", ["free", "free", "free"]),
        ("n3", "t0", ["reserved:j1", "reserved:j1", "job:r3t02"]),
    ]
    gpus = [Gpu(n, t, i, st_) for n, t, states in layout for i, st_ in enumerate(states)]

    def q(j: str, n: int, at: float, **kw) -> QueuedJob:
        return QueuedJob(job_id=j, lab="A", user="u", num_gpus=n, queue_entered_at=at, **kw)

    queue = [
        q("j0", 2, 2.0, reservation=Reservation(node="n0", tier="t0", gpus=(0,), since=0.0)),
        q("j1", 3, 1.0, reservation=Reservation(node="n3", tier="t0", gpus=(0, 1), since=0.0)),
        q("j2", 1, 1.0), q("j3", 2, 0.0, tiers=frozenset({"t0"})), q("j4", 1, 0.0),
        q("j5", 1, 0.0),
    ]  # fmt: skip
    snap = Snapshot(
        tiers={"t0": t0, "t1": t1, "t2": t2}, gpus=gpus, queue=queue, usage={},
        half_life_s=3600.0, reservation_demotion="damped", reservation_demotion_margin=0.1,
    )  # fmt: skip
    res = cycle(snap, 1000.0)
    check_invariants(snap, res, 1000.0)
    assert res.order[0] == "j3" and [(x.job_id, x.reason) for x in res.releases] == [("j1", "swap")]


@st.composite
def partial_reservations(draw) -> tuple[Snapshot, float]:
    """R6 yield: wide placements where reservations hold several GPUs and higher jobs of 1-4
    GPUs may need part of them (the generic strategy above almost never yields)."""
    ts = {"t0": tier("t0", 24, 82.6, 1, max_gpus=8), "t1": tier("t1", 12, 34.1, 0, max_gpus=4)}
    layout = [(f"n{k}", t, draw(st.sampled_from([4, 8] if t == "t0" else [2, 4])))
              for k in range(draw(st.integers(1, 3)))
              for t in [draw(st.sampled_from(["t0", "t0", "t1"]))]]  # fmt: skip
    states: dict[tuple[str, str, int], str] = {}
    queue: list[QueuedJob] = []
    for k, (n, t, c) in enumerate(draw(st.lists(st.sampled_from(layout), max_size=2, unique=True))):
        take = tuple(range(draw(st.integers(1, c - 1))))  # holders: part of one placement each
        states |= {(n, t, i): f"reserved:h{k}" for i in take}
        since = draw(st.sampled_from([0.0, 500.0]))
        queue.append(
            QueuedJob(
                job_id=f"h{k}", lab=draw(st.sampled_from(["C", "D", "D"])), user="u",
                num_gpus=draw(st.integers(len(take) + 1, min(c, ts[t].max_gpus))),
                queue_entered_at=float(k),
                reservation=Reservation(n, t, take, since, tuple(since + 10 * i for i in take)),
            )
        )  # fmt: skip
    for n, t, c in layout:  # the rest mostly busy, so that higher jobs need reserved GPUs
        for i in range(c):
            if (n, t, i) not in states:
                states[(n, t, i)] = draw(
                    st.sampled_from(["free", "job:r", "job:r", "job:r"] * 3 + ["down"])
                )
    for k in range(draw(st.integers(1, 6))):
        tf = draw(st.none() | st.just(frozenset({"t1"})))
        queue.append(
            QueuedJob(
                job_id=f"j{k}", lab=draw(st.sampled_from(["A", "A", "B", "C"])), user="u",
                num_gpus=draw(st.integers(1, 4)), queue_entered_at=float(draw(st.integers(0, 5))),
                tiers=tf,
            )
        )  # fmt: skip
    # the holders' labs (C, D) mostly use more, so that they are often below rank 1
    usage = {
        lab: LabUsage(float(draw(st.sampled_from(u))), 0.0)
        for lab, u in (("A", [0, 100]), ("B", [100, 250]), ("C", [250, 1000]), ("D", [1000]))
    }
    gpus = [Gpu(n, t, i, st_) for (n, t, i), st_ in sorted(states.items())]
    return Snapshot(tiers=ts, gpus=gpus, queue=queue, usage=usage, half_life_s=3600.0), 1000.0


@pytest.mark.parametrize("mode", MODES)
@SETTINGS
@given(partial_reservations())
def test_R6_yield_invariants_on_partial_reservations(mode, case):
    """No double-booked GPU, R1, R2, D5 (parked), D7, and `yield`'s own: a yield only below rank
    1, never of every GPU (that is R3), on reservations of several GPUs (all modes, compared)."""
    snap, now = case
    snap = msgspec.structs.replace(snap, reservation_demotion=mode)
    check_invariants(snap, cycle(snap, now), now)


def _demoted_then_redispatched() -> Snapshot:
    """n0/t0 has 4 GPUs: h0 (lab C, 2 GPUs) reserves GPU 0, GPUs 1-3 are free. j2 (lab A, t1
    only, no t1 placement) is rank 1, so h0 (rank 2) is demoted where the mode demotes (R3);
    then h0 (2 GPUs) dispatches on GPUs 0-1, j0 (3 GPUs) finds 2 idle and waits, j1 takes 2."""
    ts = {"t0": tier("t0", 24, 82.6, 1, max_gpus=8), "t1": tier("t1", 12, 34.1, 0, max_gpus=4)}
    gpus = [Gpu("n0", "t0", 0, "reserved:h0")] + [Gpu("n0", "t0", i, "free") for i in (1, 2, 3)]
    held = Reservation("n0", "t0", (0,), 0.0, (0.0,))
    queue = [
        QueuedJob(job_id="h0", lab="C", user="u", num_gpus=2, queue_entered_at=0.0,
                  reservation=held),
        QueuedJob(job_id="j0", lab="C", user="u", num_gpus=3, queue_entered_at=0.0),
        QueuedJob(job_id="j1", lab="C", user="u", num_gpus=1, queue_entered_at=0.0),
        QueuedJob(job_id="j2", lab="A", user="u", num_gpus=1, queue_entered_at=0.0,
                  tiers=frozenset({"t1"})),
    ]  # fmt: skip
    usage = {lab: LabUsage(v, 0.0) for lab, v in (("A", 0.0), ("C", 250.0))}
    return Snapshot(tiers=ts, gpus=gpus, queue=queue, usage=usage, half_life_s=3600.0)


@pytest.mark.parametrize("mode", MODES)
def test_D5_lower_job_may_take_what_a_demoted_job_left_the_higher_one_short_of(mode):
    """D5: j1 (rank 4) starts on 1 of the 2 GPUs h0 (rank 2) left idle: j0 (rank 3, 3 GPUs)
    cannot use them this cycle, whether h0's reservation was demoted (R3; strict, hysteresis)
    or kept until it dispatched (R6). The check must count GPU 0, idle again after the
    demotion, as taken by h0's dispatch (it once counted it idle twice: 3 usable for j0)."""
    snap = msgspec.structs.replace(_demoted_then_redispatched(), reservation_demotion=mode)
    res = cycle(snap, 1000.0)
    assert res.order == ["j2", "h0", "j0", "j1"]
    assert [(d.job_id, d.gpus) for d in res.dispatches] == [("h0", (0, 1)), ("j1", (2,))]
    assert res.pending["j0"] == "Priority" and res.pending["j2"] == "Resources"
    demoted = mode in ("strict", "hysteresis")  # C is beyond the margin over A (R6)
    assert [(r.job_id, r.reason) for r in res.releases] == [
        ("h0", "demoted" if demoted else "dispatched")
    ]
    if mode == "strict":  # the literal oracle decides the same
        assert res == ref_cycle(snap, 1000.0)
    check_invariants(snap, res, 1000.0)


def _small_sim(seed: int, n_jobs: int) -> Sim:
    rnd = random.Random(seed)
    ts = {"fast": tier("fast", 24, 82.6, 20, 4), "slow": tier("slow", 12, 34.1, 10, 2)}
    gpus = {}
    for n in range(rnd.randint(1, 3)):
        for t in rnd.sample(sorted(ts), rnd.randint(1, 2)):
            for i in range(rnd.randint(1, 4)):
                gpus[(f"n{n}", t, i)] = "free"
    sim = Sim(tiers=ts, gpus=gpus, durations={})
    for k in range(n_jobs):
        jid = f"j{k}"
        sim.durations[jid] = 10.0 * rnd.randint(1, 6)
        sim.submit(
            QueuedJob(
                job_id=jid,
                lab=rnd.choice(LABS),
                user="u",
                num_gpus=rnd.randint(1, 4),
                queue_entered_at=float(k),
            )
        )
    return sim


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=100, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 12))
def test_F5_every_gpu_second_charged_exactly_once(mode, seed, n_jobs):
    sim = _small_sim(seed, n_jobs)
    sim.demotion = mode
    for _ in range(40):
        res = sim.step(5.0)
        check_invariants(*sim.results[-1], sim.now)
        assert all(r.gpu_seconds >= 0 for r in res.releases)
    sim.close()
    assert abs(sim.charged - sim.truth) <= 1e-6 * max(1.0, sim.truth)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6))
def test_no_starvation_of_a_2gpu_job_under_1gpu_arrivals(seed):
    """The lowest-usage lab's 2-GPU job dispatches within one max duration (+ 2 cycles):
    as rank 1 it reserves GPUs as they free (R1) and no one else may take them (R2)."""
    rnd = random.Random(seed)
    ts = {"fast": tier("fast", 24, 82.6, 20, 2)}
    gpus = {(f"n{n}", "fast", i): "free" for n in range(2) for i in range(2)}
    sim = Sim(tiers=ts, gpus=gpus, durations={"big": 30.0}, half_life_s=1e9)
    sim.usage = {"L": LabUsage(0.0, 0.0), "X": LabUsage(1.0, 0.0), "Y": LabUsage(2.0, 0.0)}
    max_d, dt = 60.0, 5.0
    k = 0
    for _ in range(6):  # the cluster is full of 1-GPU jobs first
        sim.durations[f"s{k}"] = rnd.uniform(10, max_d)
        sim.submit(
            QueuedJob(
                job_id=f"s{k}", lab=rnd.choice("XY"), user="u", num_gpus=1, queue_entered_at=0.0
            )
        )
        k += 1
    sim.step(dt)
    sim.submit(QueuedJob(job_id="big", lab="L", user="u", num_gpus=2, queue_entered_at=sim.now))
    submitted = sim.now
    while "big" not in sim.dispatched_at and sim.now < submitted + 10 * max_d:
        for _ in range(rnd.randint(0, 3)):  # 1-GPU jobs keep arriving
            sim.durations[f"s{k}"] = rnd.uniform(10, max_d)
            sim.submit(
                QueuedJob(
                    job_id=f"s{k}",
                    lab=rnd.choice("XY"),
                    user="u",
                    num_gpus=1,
                    queue_entered_at=sim.now,
                )
            )
            k += 1
        sim.step(dt)
    assert sim.dispatched_at["big"] - submitted <= max_d + 2 * dt
