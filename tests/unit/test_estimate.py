"""Estimated start (SPEC U4) on small hand-made clusters where the answer is known exactly.

The state is built from real events through the services' fold (ClusterState), then played
forward by `jpu.explain.estimate` with the policy core (D1–D8, R1–R5, F3/F4, Q5, D6)."""

from __future__ import annotations

from itertools import count
from typing import Any

import pytest

from jpu.bus import Delivered
from jpu.config import Config, load_config
from jpu.domain import codec
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.runs import KEEP
from jpu.events import (
    Event,
    JobArray,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobStarted,
    JobSubmitted,
    MaintenanceChanged,
    ReservationStarted,
    UsageCharged,
    new_event_id,
)
from jpu.explain.estimate import RunTimes, estimate
from jpu.sim.forward import EstimateParams

T0 = 1_000_000.0
H = 3600.0


def _config(**over: Any) -> Config:
    base = load_config(env={})
    return base if not over else type(base)(**{**_fields(base), **over})


def _fields(c: Config) -> dict[str, Any]:
    import msgspec

    return {f.name: getattr(c, f.name) for f in msgspec.structs.fields(c)}


class Log:
    """Events through the real fold, as the dispatcher follows them."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.state = ClusterState.new(config)
        self.seq = count(1)
        self.runtimes = RunTimes(self.state.runs)  # the fold's recent runs (U4)

    def add(self, cls: type[Event], ts: float, /, **kw: Any) -> None:
        event = cls(event_id=new_event_id(), ts=ts, **kw)
        evolve(self.state, Delivered(seq=next(self.seq), subject="s", event=event, headers={}))

    def submit(self, job: str, lab: str, user: str, n: int, ts: float, **kw: Any) -> None:
        self.add(
            JobSubmitted,
            ts,
            job_id=job,
            lab=lab,
            user=user,
            name=job,
            command="c",
            num_gpus=n,
            **kw,
        )

    def queue(self, job: str, lab: str, user: str, n: int, ts: float, **kw: Any) -> None:
        self.submit(job, lab, user, n, ts, **kw)
        self.add(JobPromoted, ts, job_id=job, queue_entered_at=ts)

    def run(
        self,
        job: str,
        lab: str,
        user: str,
        node: str,
        tier: str,
        gpus: list[int],
        ts: float,
        **kw: Any,
    ) -> None:
        self.queue(job, lab, user, len(gpus), ts, **kw)
        self.add(JobDispatched, ts, job_id=job, attempt=1, node=node, tier=tier, gpus=gpus)
        self.add(JobStarted, ts, job_id=job, attempt=1, backend_job_id=f"b-{job}")

    def estimate(self, now: float, **params: Any) -> dict[str, tuple[float | None, str]]:
        result = estimate(self.state, self.config, now, self.runtimes, EstimateParams(**params))
        return {j: (e.start, e.basis) for j, e in result.estimates.items()}


def _one_node(gpus: int = 2) -> Config:
    base = load_config(env={})
    return _config(
        nodes=[type(base.nodes[0])(name="n1", gpus={"rtx4090": gpus})],
    )


def test_U4_next_job_starts_when_the_running_jobs_limit_ends():
    log = Log(_one_node(1))
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=2 * H)
    log.queue("q", "B", "b", 1, T0 + 60)
    est = log.estimate(T0 + 600)
    assert est == {"q": (T0 + 2 * H, "limits")}


def test_U4_job_that_fits_now_starts_now():
    log = Log(_one_node(2))
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=H)
    log.queue("q", "B", "b", 1, T0 + 60)
    assert log.estimate(T0 + 100) == {"q": (T0 + 100, "limits")}


def test_U4_starts_when_the_gpus_free_not_at_the_coarse_cycle():
    """The forward's cycles are ≥ 60 s and 3 % of the distance apart (here 216 s at 2 h); the
    live dispatcher cycles within 0.2 s of an end. Two ends 20 s apart: both queued jobs start
    at their GPU's end, and the job after q1 on its GPU at q1's end (no drift down a chain)."""
    log = Log(_one_node(2))
    log.run("r1", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=2 * H)
    log.run("r2", "A", "a", "n1", "rtx4090", [1], T0 + 20, time_limit_s=2 * H)
    log.queue("q1", "B", "b", 1, T0 + 30, time_limit_s=H)
    log.queue("q2", "B", "b", 1, T0 + 31, time_limit_s=3 * H)
    log.queue("q3", "B", "b", 1, T0 + 32, time_limit_s=H)
    est = log.estimate(T0 + 40)
    assert est == {
        "q1": (T0 + 2 * H, "limits"),
        "q2": (T0 + 2 * H + 20, "limits"),
        "q3": (T0 + 3 * H, "limits"),
    }


def test_U4_D1_queue_order_follows_fair_share_including_charges_at_ends():
    """Two jobs wait for one GPU; the lab with less usage goes first (D1). When its job ends its
    lab is charged (F4) and the other lab's job is next."""
    log = Log(_one_node(1))
    log.add(UsageCharged, T0 - 10, lab="A", amount=1e6, value_after=1e6, as_of=T0 - 10)
    log.run("r", "C", "c", "n1", "rtx4090", [0], T0, time_limit_s=H)
    log.queue("a1", "A", "a", 1, T0 + 1, time_limit_s=H)  # earlier, but lab A used more
    log.queue("b1", "B", "b", 1, T0 + 2, time_limit_s=H)
    est = log.estimate(T0 + 10)
    assert est["b1"] == (T0 + H, "limits")
    assert est["a1"] == (T0 + 2 * H, "limits")


def test_U4_R1_multi_gpu_job_behind_a_reservation():
    """X (2 GPUs, rank 1) holds a reservation of GPU 0; GPU 1 runs R until T0+1h. X starts at
    T0+1h (its reservation completes, D3.b); Y (1 GPU, lower rank) cannot take reserved GPUs
    (R2, D5) and starts when X ends, T0+1h+2h."""
    log = Log(_one_node(2))
    log.run("r", "C", "c", "n1", "rtx4090", [1], T0, time_limit_s=H)
    log.queue("x", "A", "a", 2, T0 + 10, time_limit_s=2 * H)
    log.add(ReservationStarted, T0 + 10, job_id="x", node="n1", tier="rtx4090", gpus=[0])
    log.queue("y", "B", "b", 1, T0 + 20, time_limit_s=H)
    log.add(UsageCharged, T0, lab="B", amount=1e9, value_after=1e9, as_of=T0)  # y ranks below
    est = log.estimate(T0 + 30)
    assert est["x"] == (T0 + H, "limits")
    assert est["y"] == (T0 + 3 * H, "limits")


def test_U4_R3_reservation_lost_to_a_lab_whose_charge_reorders():
    """The seed's R3 shape forward: X (BCG, 2 GPUs) reserves; Y (BCG) ends and its charge puts
    BCG above KDG; KDG's 1-GPU job K then ranks first and takes the freed GPU (X is demoted)."""
    log = Log(_one_node(2))
    log.add(UsageCharged, T0, lab="BCG", amount=24_000, value_after=24_000, as_of=T0)
    log.add(UsageCharged, T0, lab="KDG", amount=28_000, value_after=28_000, as_of=T0)
    log.run("y", "BCG", "y", "n1", "rtx4090", [1], T0, time_limit_s=300)
    log.queue("x", "BCG", "x", 2, T0 + 1, time_limit_s=H)
    log.add(ReservationStarted, T0 + 1, job_id="x", node="n1", tier="rtx4090", gpus=[0])
    log.queue("k", "KDG", "k", 1, T0 + 2, time_limit_s=600)
    est = log.estimate(T0 + 3)
    # Y's end at T0+300 charges BCG 300 × 82.6 = 24,780 (> 28,000 − 24,000): K is rank 1 (D1),
    # X loses its reservation (R3) and K takes a GPU; X starts once K ends.
    assert est["k"] == (T0 + 300, "limits")
    assert est["x"] == (T0 + 900, "limits")


def test_U4_Q5_personal_queue_job_is_promoted_when_a_slot_frees():
    log = Log(_one_node(1))
    log.config = _config(nodes=log.config.nodes, max_active_jobs=1)
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=H)
    log.submit("p", "A", "a", 1, T0 + 5, time_limit_s=H)  # user a's slot is taken (Q5)
    est = log.estimate(T0 + 10)
    assert est == {"p": (T0 + H, "limits")}


def test_U4_D6_maintenance_without_a_known_end_gives_unknown():
    log = Log(_one_node(1))
    log.queue("q", "A", "a", 1, T0, time_limit_s=H)
    log.add(MaintenanceChanged, T0 + 1, state="DRAINING", by="admin", message="nfs")
    assert log.estimate(T0 + 10) == {"q": (None, "unknown")}


def test_U4_D6_no_start_before_a_maintenance_window_ends():
    log = Log(_one_node(1))
    log.queue("q", "A", "a", 1, T0, time_limit_s=H)
    log.add(MaintenanceChanged, T0 + 1, state="DRAINING", by="admin", message="nfs")
    est = log.estimate(T0 + 10, maintenance_ends_at=T0 + 2 * H)
    assert est == {"q": (T0 + 2 * H, "limits")}


def test_U4_predicted_duration_is_the_users_median_then_the_labs():
    log = Log(_one_node(1))
    for i, run_s in enumerate((600.0, 1200.0, 3000.0)):  # user a, 1 GPU: median 1200
        start = T0 + i * 10_000
        log.run(f"h{i}", "A", "a", "n1", "rtx4090", [0], start)
        log.add(
            JobEnded,
            start + run_s,
            job_id=f"h{i}",
            attempt=1,
            state="COMPLETED",
            node="n1",
            tier="rtx4090",
            gpus=[0],
            gpu_seconds_run=run_s,
            tflops=82.6,
        )
    assert log.runtimes.predict("a", "A", 1) == 1200.0
    assert log.runtimes.predict("a2", "A", 1) == 1200.0  # the lab's
    assert log.runtimes.predict("z", "Z", 1) is None
    t = T0 + 100_000
    log.run("r", "A", "a", "n1", "rtx4090", [0], t)  # no limit: runs the predicted 1200 s
    log.queue("q", "B", "b", 1, t + 1, time_limit_s=H)
    assert log.estimate(t + 10) == {"q": (t + 1200, "predicted")}


def test_U4_recent_runs_are_in_the_snapshot_and_stay_bounded():
    """A dispatcher restarted from a snapshot predicts as one that replayed the whole log (the
    history was the dispatcher's own memory before, empty after such a restart), and the
    history keeps the last KEEP runs per user and GPU count, however many jobs ended."""
    log = Log(_one_node(1))
    for i in range(KEEP + 5):  # the first five (100 s) fall out: the rest take 1,200 s
        start, run_s = T0 + i * 10_000, 100.0 if i < 5 else 1200.0
        log.run(f"h{i}", "A", "a", "n1", "rtx4090", [0], start)
        log.add(
            JobEnded, start + run_s, job_id=f"h{i}", attempt=1, state="COMPLETED",
            node="n1", tier="rtx4090", gpus=[0], gpu_seconds_run=run_s, tflops=82.6,
        )  # fmt: skip
    assert log.state.runs.by_user["a"][1] == [1200.0] * KEEP
    restored = codec.unpack(codec.pack(log.state, "JPU", T0), log.config)[1]
    assert restored.runs == log.state.runs
    assert RunTimes(restored.runs).predict("a", "A", 1) == 1200.0


def test_U4_running_job_with_no_limit_and_no_history_leaves_the_wait_unknown():
    log = Log(_one_node(1))
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0)
    log.queue("q", "B", "b", 1, T0 + 1, time_limit_s=H)
    assert log.estimate(T0 + 10) == {"q": (None, "unknown")}


def test_U4_beyond_the_horizon_is_unknown():
    log = Log(_one_node(1))
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=10 * H)
    log.queue("q", "B", "b", 1, T0 + 1, time_limit_s=H)
    assert log.estimate(T0 + 10, horizon_s=5 * H) == {"q": (None, "unknown")}


@pytest.mark.parametrize("n", [1, 2])
def test_U4_estimate_does_not_change_the_live_state(n: int):
    log = Log(_one_node(2))
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=H)
    log.queue("q", "B", "b", n, T0 + 1, time_limit_s=H)
    before = (dict(log.state.holders), len(log.state.queue), dict(log.state.usage))
    packed = codec.pack(log.state, "s", 0.0)  # every job's view, byte for byte
    log.estimate(T0 + 10)
    assert (dict(log.state.holders), len(log.state.queue), dict(log.state.usage)) == before
    assert codec.pack(log.state, "s", 0.0) == packed  # the forward played its own copy


def test_U4_limits_scaled_by_the_users_habit_of_writing_loose_limits():
    """A user whose jobs end at half their limit: a new running job's end is its limit × 0.5
    (basis predicted); with RunTimes(scale_limits=False) the limit itself (basis limits)."""
    log = Log(_one_node(1))
    for i in range(3):
        start = T0 + i * 10_000
        log.run(f"h{i}", "A", "a", "n1", "rtx4090", [0], start, time_limit_s=2 * H)
        log.add(
            JobEnded,
            start + H,
            job_id=f"h{i}",
            attempt=1,
            state="COMPLETED",
            node="n1",
            tier="rtx4090",
            gpus=[0],
            gpu_seconds_run=H,
            tflops=82.6,
        )
    assert log.runtimes.limit_ratio("a", "A") == 0.5
    t = T0 + 100_000
    log.run("r", "A", "a", "n1", "rtx4090", [0], t, time_limit_s=4 * H)
    log.queue("q", "B", "b", 1, t + 1, time_limit_s=H)
    assert log.estimate(t + 10) == {"q": (t + 2 * H, "predicted")}
    log.runtimes.scale_limits = False
    assert log.estimate(t + 10) == {"q": (t + 4 * H, "limits")}


def _two_tiers(**over: Any) -> Config:
    base = load_config(env={})
    node = type(base.nodes[0])
    return _config(
        nodes=[node(name="n1", gpus={"rtx4090": 2}), node(name="n2", gpus={"rtx3080ti": 1})],
        **over,
    )


@pytest.mark.parametrize("mode", ["strict", "useful"])
def test_U4_R6_estimate_plays_the_dispatchers_demotion_mode(mode: str) -> None:
    """X (lab A, 2 × rtx4090) reserves GPU 0 of n1 but K (lab B, less usage, rtx3080ti only)
    now ranks above it. Under `strict` X is demoted at once (R3) and L (lab D, 1 × rtx4090,
    lowest rank) takes GPU 0 now. Under `useful` K cannot use n1, so X keeps GPU 0 (R6) and L
    must wait for R's GPU 1. The estimate plays the configured mode, as the dispatcher does."""
    log = Log(_two_tiers(reservation_demotion=mode))
    for lab, usage in (("B", 1_000.0), ("A", 24_000.0), ("C", 5e5), ("D", 1e6)):
        log.add(UsageCharged, T0, lab=lab, amount=usage, value_after=usage, as_of=T0)
    log.run("r", "C", "c", "n1", "rtx4090", [1], T0, time_limit_s=H)
    log.run("s", "C", "c2", "n2", "rtx3080ti", [0], T0, time_limit_s=2 * H)
    log.queue("x", "A", "a", 2, T0 + 5, time_limit_s=H, tiers=["rtx4090"])
    log.add(ReservationStarted, T0 + 10, job_id="x", node="n1", tier="rtx4090", gpus=[0])
    log.queue("k", "B", "b", 1, T0 + 20, time_limit_s=H, tiers=["rtx3080ti"])
    log.queue("l", "D", "d", 1, T0 + 25, time_limit_s=3 * H, tiers=["rtx4090"])
    now = T0 + 30
    est = log.estimate(now)
    assert est["k"] == (T0 + 2 * H, "limits")  # when S frees n2, in both modes
    if mode == "strict":
        assert est["l"] == (now, "limits")  # on the GPU X was demoted from
        l_ends = now + 3 * H
    else:
        assert est["l"] == (T0 + H, "limits")  # GPU 0 stays X's: L gets R's GPU 1
        l_ends = T0 + 4 * H
    start, basis = est["x"]
    assert basis == "limits" and start is not None
    # X starts when L gives its GPU back, within the estimate's cycle resolution
    assert l_ends <= start <= l_ends + 0.03 * (l_ends - now) + 60.0


def test_U4_forward_starts_from_the_fold_of_the_present():
    """The forward estimate starts from its own copy of the dispatcher's fold (`own_fold`): the
    cycle it first runs sees what the dispatcher's own cycle sees (queue records with their
    reservation join times, running jobs, GPU rows, usage, personal queues and slots)."""
    from jpu.domain.dispatch import snapshot
    from jpu.events import ReservationGrown, ReservationReleased
    from jpu.explain.estimate import present
    from jpu.sim.forward import ForwardSim

    config = _config(
        nodes=[type(_one_node().nodes[0])(name=n, gpus={"rtx4090": 4}) for n in ("n1", "n2")],
        max_active_jobs=1,
    )
    log = Log(config)
    log.add(UsageCharged, T0, lab="A", amount=5.0, value_after=5.0, as_of=T0, reason="initial")
    log.run("r", "A", "a", "n1", "rtx4090", [0, 1], T0, time_limit_s=2 * H)
    log.queue("w", "B", "b", 4, T0 + 10)
    log.add(ReservationStarted, T0 + 20, job_id="w", node="n2", tier="rtx4090", gpus=[0])
    log.add(
        ReservationGrown, T0 + 30, job_id="w", node="n2", tier="rtx4090", gpus=[0, 1], added=[1]
    )
    log.queue("s", "C", "c", 1, T0 + 40)  # swapped away from a reservation: R4 time rides along
    log.add(ReservationStarted, T0 + 41, job_id="s", node="n2", tier="rtx4090", gpus=[2])
    log.add(
        ReservationReleased, T0 + 50, job_id="s", node="n2", tier="rtx4090", gpus=[2],
        reason="swap", gpu_seconds=9.0, charged_now=False, tflops=82.6,
    )  # fmt: skip
    log.submit("p", "B", "b", 1, T0 + 60)  # b's slot is taken: personal queue (Q5)
    now = T0 + 100
    sim = ForwardSim(present(log.state, config, now, log.runtimes), EstimateParams())
    live, seeded = snapshot(log.state, config), snapshot(sim.state, config)
    assert list(seeded.queue) == list(live.queue)
    assert seeded.running == live.running and seeded.gpus == live.gpus
    assert seeded.usage == live.usage
    assert sim.cluster.rows == live.gpus and list(sim.cluster.running.values()) == live.running
    assert {u: list(q) for u, q in sim.state.personal.items()} == {
        "b": ["p"]
    } and sim.state.slots == log.state.slots
    s = sim.state.jobs["s"]
    assert (s.uncharged_reserved_gpu_s, s.uncharged_reserved_usage) == pytest.approx((9.0, 743.4))


def _history(log: Log, user: str, runs: list[float], limit: float | None = None) -> None:
    """Completed 1-GPU runs of `user` (lab A) on n1, far in the past."""
    for i, run_s in enumerate(runs):
        job, start = f"h-{user}-{i}", T0 - 1e6 + i * 10_000
        log.run(job, "A", user, "n1", "rtx4090", [0], start, time_limit_s=limit)
        log.add(
            JobEnded, start + run_s, job_id=job, attempt=1, state="COMPLETED", node="n1",
            tier="rtx4090", gpus=[0], gpu_seconds_run=run_s, tflops=82.6,
        )  # fmt: skip


def test_U4_full_cluster_estimate_is_never_before_the_running_jobs_limits_end():
    """A full cluster (0 idle, reason Resources) whose running jobs have limits of 2 h but a
    habit of ending at half of them: past that predicted end (an overrun) the estimate played
    them ending "now", so it equalled the moment it was computed and moved with every
    recomputation. It is the first moment their limits free a GPU, and it stays put."""
    log = Log(_one_node(2))
    _history(log, "a", [H, H, H], limit=2 * H)  # ratio 0.5: predicted end = limit × 0.5
    log.run("r1", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=2 * H)
    log.run("r2", "A", "a", "n1", "rtx4090", [1], T0 + 60, time_limit_s=2 * H)
    log.queue("q", "B", "b", 1, T0 + 100, time_limit_s=H)
    for now in (T0 + 1.5 * H, T0 + 1.5 * H + 15, T0 + 1.5 * H + 30):  # both past 1 h
        start, basis = log.estimate(now)["q"]
        assert start == T0 + 2 * H, (now, start)  # r1's limit: the first GPU that can free
        assert basis == "limits"


def test_U4_overrun_running_job_without_a_limit_ends_after_the_longer_recorded_runs():
    """No limit, predicted 20 min (the median), running 50 min: it ends after the median of
    the recorded runs longer than 50 min (90 min), not "now"."""
    log = Log(_one_node(1))
    _history(log, "a", [600.0, 1200.0, 1200.0, 1800.0, 5400.0])
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0)
    log.queue("q", "B", "b", 1, T0 + 1, time_limit_s=H)
    assert log.estimate(T0 + 600) == {"q": (T0 + 1200, "predicted")}  # not overrun yet
    assert log.estimate(T0 + 3000) == {"q": (T0 + 5400, "predicted")}


def test_U4_overrun_past_every_recorded_run_is_unknown_and_says_why():
    """Running longer than any recorded run and with no limit: nobody knows when it ends. The
    estimate is unknown and names the job holding the GPU (not "now", not a bare unknown)."""
    log = Log(_one_node(1))
    _history(log, "a", [600.0, 1200.0])
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0)
    log.queue("q", "B", "b", 1, T0 + 1, time_limit_s=H)
    now = T0 + 2 * H
    est = estimate(log.state, log.config, now, log.runtimes).estimates["q"]
    assert (est.start, est.basis) == (None, "unknown")
    assert est.why is not None and "held by r" in est.why and "no time limit" in est.why


def test_U4_unknown_says_why_maintenance_and_horizon():
    log = Log(_one_node(1))
    log.queue("q", "A", "a", 1, T0, time_limit_s=H)
    log.add(MaintenanceChanged, T0 + 1, state="DRAINING", by="admin", message="nfs")
    why = estimate(log.state, log.config, T0 + 10).estimates["q"].why
    assert why is not None and "maintenance" in why
    log = Log(_one_node(1))
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=10 * H)
    log.queue("q", "B", "b", 1, T0 + 1, time_limit_s=H)
    got = estimate(log.state, log.config, T0 + 10, None, EstimateParams(horizon_s=5 * H))
    why = got.estimates["q"].why
    assert why is not None and "horizon" in why
    assert estimate(log.state, log.config, T0 + 10).estimates["q"].why is None  # known start


def test_U4_Q8_a_dependent_job_starts_after_its_parents_estimated_end():
    log = Log(_one_node(2))  # a free GPU: only the dependency holds it back
    log.config = _config(nodes=log.config.nodes, max_active_jobs=4)
    log.run("r", "A", "a", "n1", "rtx4090", [0], T0, time_limit_s=H)
    log.submit("d", "A", "a", 1, T0 + 5, time_limit_s=H, dependency="afterok:r")
    log.submit("e", "A", "a", 1, T0 + 6, time_limit_s=H, dependency="afterok:d")
    est = log.estimate(T0 + 10)
    assert est == {"d": (T0 + H, "limits"), "e": (T0 + 2 * H, "limits")}


def test_U4_Q8_a_job_waiting_on_a_whole_array_starts_after_its_last_task_ends():
    log = Log(_one_node(1))
    log.config = _config(nodes=log.config.nodes, max_active_jobs=4)
    log.submit("A", "A", "a", 1, T0, time_limit_s=H, array=JobArray(tasks=[0, 1], spec="0-1"))
    for k in (0, 1):  # as intake promotes them at the submit (Q5: four slots)
        log.add(JobPromoted, T0, job_id=f"A_{k}", queue_entered_at=T0)
    log.submit("d", "A", "a", 1, T0 + 5, time_limit_s=H, dependency="afterok:A")
    est = log.estimate(T0 + 10)
    assert est == {
        "A_0": (T0 + 10, "limits"),
        "A_1": (T0 + 10 + H, "limits"),
        "d": (T0 + 10 + 2 * H, "limits"),
    }


def test_U4_Q7_the_array_throttle_is_honoured_in_the_forward():
    log = Log(_one_node(4))  # four free GPUs, four slots: only %2 holds tasks back
    log.config = _config(nodes=log.config.nodes, max_active_jobs=4)
    spec = JobArray(tasks=[0, 1, 2, 3], throttle=2, spec="0-3%2")
    log.submit("A", "A", "a", 1, T0, time_limit_s=H, array=spec)
    for k in (0, 1):  # as intake promotes them at the submit: %2 keeps A_2, A_3 waiting
        log.add(JobPromoted, T0, job_id=f"A_{k}", queue_entered_at=T0)
    est = log.estimate(T0 + 10)
    assert est == {
        "A_0": (T0 + 10, "limits"),
        "A_1": (T0 + 10, "limits"),
        "A_2": (T0 + 10 + H, "limits"),  # not before two of the array's tasks end
        "A_3": (T0 + 10 + H, "limits"),
    }


def test_U4_Q9_a_held_job_has_no_estimated_start_and_says_why():
    log = Log(_one_node(2))
    log.submit("h", "A", "a", 1, T0, time_limit_s=H, hold=True)
    result = estimate(log.state, log.config, T0 + 10, log.runtimes, EstimateParams())
    e = result.estimates["h"]
    assert (e.start, e.basis) == (None, "unknown")
    assert e.why == "it is held: it can start only once released (jpu release)"


def test_U4_served_start_is_never_before_now() -> None:
    from jpu.explain.estimate import served_start

    assert served_start(100.0, 106.0) == 106.0  # computed 6 s ago for a start now due
    assert served_start(200.0, 106.0) == 200.0
    assert served_start(None, 106.0) is None  # unknown stays unknown
