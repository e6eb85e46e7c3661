"""Reservations (SPEC R1–R4) and OOM escalation (X7, X8) through the simulator."""

from __future__ import annotations

import pytest

from jpu.testing.simkit import Simulate

ONE_4090_NODE = [{"name": "n1", "gpus": {"rtx4090": 2}}]


def job(id: str, lab: str, user: str, submit_s: float, num_gpus: int, duration_s: float,
        **kw: object) -> dict[str, object]:  # fmt: skip
    return {"id": id, "lab": lab, "user": user, "submit_s": submit_s, "num_gpus": num_gpus,
            "duration_s": duration_s, **kw}  # fmt: skip


def test_R3_worked_example_demotion_charges_reservation_at_once(simulate: Simulate) -> None:
    """SPEC R3: X (BCG, 2 GPUs) rank 1 reserves 1 of 2 rtx4090; Y (BCG, 1 GPU) runs; BCG 24,000 <
    KDG 28,000. Y ends 5 min later, its cost puts BCG above KDG; next cycle X is rank 2: release,
    charge 1 × 300 × 82.6 = 24,780 to BCG at once, X back to GLOBAL_QUEUE_WAIT."""
    labs = [{"name": "BCG", "usage": 24_000}, {"name": "KDG", "usage": 28_000}]
    jobs = [
        job("y", "BCG", "bob", 0, 1, 301),  # running from t=0 on GPU 0
        job("x", "BCG", "alice", 1, 2, 1000),  # t=1 rank 1: reserves the idle GPU 1
        job("z", "KDG", "kim", 1, 2, 500),  # rank 2 while BCG < KDG
    ]
    run = simulate(jobs, labs=labs, nodes=ONE_4090_NODE, half_life_s=1e12)
    started = run.of("ReservationStarted", "x")
    assert [(e.ts, e.gpus) for e in started] == [(1.0, [1])]
    rel = run.of("ReservationReleased", "x")[0]
    assert (rel.ts, rel.reason, rel.gpu_seconds, rel.charged_now) == (301.0, "demoted", 300.0, True)
    demoted = [c for c in run.of("UsageCharged") if c.reason == "demoted"]
    assert [(c.lab, c.job_id, c.ts) for c in demoted] == [("BCG", "x", 301.0)]
    assert demoted[0].amount == pytest.approx(24_780.0, abs=1e-6)
    # KDG's z is rank 1 now and both GPUs are idle: it dispatches in the same cycle
    assert run.of("JobDispatched", "z")[0].ts == 301.0
    # X keeps queue_entered_at, runs after z; its end charges only the run (reservation paid)
    x_end = run.of("JobEnded", "x")[0]
    assert x_end.gpu_seconds_reserved == 0.0
    assert x_end.usage == pytest.approx(2 * 1000 * 82.6)
    assert run.job("x")["charged_tflop_s"] == pytest.approx(24_780 + 2 * 1000 * 82.6)
    assert run.summary["counts"]["demotions"] == 1


def test_R2_two_gpu_job_reserving_while_one_gpu_jobs_arrive_still_runs(simulate: Simulate) -> None:
    """A rank-1 2-GPU job gathers GPUs as they free; 1-GPU jobs arriving meanwhile (lab A) never
    take the reserved GPUs, so it runs as soon as its placement's second GPU frees."""
    labs = [{"name": "A", "usage": 1e9}]  # A ranks below B throughout
    jobs = [job(f"a{i}", "A", f"ua{i}", 0, 1, 100 * (i + 1)) for i in range(4)]
    jobs.append(job("wide", "B", "ub", 10, 2, 1000))
    jobs += [job(f"late{i}", "A", f"ul{i}", 20 + 30 * i, 1, 5000) for i in range(10)]
    run = simulate(jobs, labs=labs, nodes=[{"name": "n1", "gpus": {"rtx4090": 2}},
                                           {"name": "n2", "gpus": {"rtx4090": 2}}])  # fmt: skip
    res = run.of("ReservationStarted", "wide")
    assert res and res[0].ts == 100.0  # a0 ends: the first idle GPU is reserved at once (D3.c)
    d = run.of("JobDispatched", "wide")[0]
    # the second GPU of that node frees when its other a-job ends
    a_on_node = [e for e in run.of("JobDispatched") if e.job_id.startswith("a") and
                 e.node == res[0].node]  # fmt: skip
    second_free = max(run.of("JobEnded", e.job_id)[0].ts for e in a_on_node)
    assert (d.ts, d.node, len(d.gpus)) == (second_free, res[0].node, 2)
    # no late 1-GPU job started on that node while wide reserved it
    for e in run.of("JobDispatched"):
        if e.job_id.startswith("late") and e.node == d.node:
            assert e.ts >= run.of("JobEnded", "wide")[0].ts
    ended = run.of("JobEnded", "wide")[0]
    assert ended.gpu_seconds_reserved == pytest.approx(second_free - 100.0)  # 1 GPU held
    assert ended.usage == pytest.approx((2 * 1000 + second_free - 100.0) * 82.6)  # F2


def test_X8_oom_on_3080ti_escalates_to_4090_as_attempt_2(simulate: Simulate) -> None:
    # the 4090s are busy until t=1000, so the 20 GB job first lands on a 12 GB rtx3080ti
    jobs = [job(f"busy{i}", "L1", f"b{i}", 0, 1, 1000) for i in range(4)]
    jobs.append(job("big", "L2", "u", 1, 1, 500, peak_vram_gb=20))
    run = simulate(jobs)
    d1, d2 = run.of("JobDispatched", "big")
    assert (d1.attempt, d1.tier, d1.ts) == (1, "rtx3080ti", 1.0)
    e1, e2 = run.of("JobEnded", "big")
    assert (e1.state, e1.oom, e1.ts, e1.reason) == ("FAILED", True, 61.0, "OOM")  # oom_after_s 60
    assert e1.usage == pytest.approx(60 * 34.1)
    retry = run.of("JobRetryScheduled", "big")[0]
    assert (retry.attempt, retry.min_vram_gb, retry.ts) == (2, 13, 61.0)
    assert (d2.attempt, d2.tier, d2.ts) == (2, "rtx4090", 1000.0)
    assert (e2.state, e2.attempt, e2.oom) == ("COMPLETED", 2, False)
    assert run.job("big")["attempts"] == 2 and run.job("big")["tier"] == "rtx4090"
    assert run.job("big")["charged_tflop_s"] == pytest.approx(60 * 34.1 + 500 * 82.6)
    # X8: the retry keeps queue_entered_at (one promotion only)
    assert len(run.of("JobPromoted", "big")) == 1


def test_X8_oom_with_no_bigger_tier_fails_with_reason_OOM(simulate: Simulate) -> None:
    run = simulate([job("huge", "L1", "u", 0, 1, 500, peak_vram_gb=30, oom_after_s=5)])
    (ended,) = run.of("JobEnded", "huge")
    assert (ended.state, ended.oom, ended.reason, ended.tier, ended.ts) == (
        "FAILED", True, "OOM", "rtx4090", 5.0)  # fmt: skip
    assert not run.of("JobRetryScheduled")
    assert run.job("huge")["state"] == "FAILED" and run.job("huge")["reason"] == "OOM"


def test_X8_max_attempts_bounds_escalation(simulate: Simulate) -> None:
    jobs = [job(f"busy{i}", "L1", f"b{i}", 0, 1, 1000) for i in range(4)]
    jobs.append(job("big", "L2", "u", 1, 1, 500, peak_vram_gb=20))
    run = simulate(jobs, max_attempts=1)
    assert run.job("big")["state"] == "FAILED" and not run.of("JobRetryScheduled")


def test_cancel_while_reserving_releases_and_charges_with_the_end(simulate: Simulate) -> None:
    jobs = [job("y", "A", "u1", 0, 1, 1000), job("x", "B", "u2", 10, 2, 100, cancel_s=90)]
    run = simulate(jobs, nodes=ONE_4090_NODE)
    rel = run.of("ReservationReleased", "x")[0]
    assert (rel.reason, rel.charged_now, rel.ts, rel.gpu_seconds) == (
        "cancelled",
        False,
        100.0,
        90.0,
    )
    end = run.of("JobEnded", "x")[0]
    assert (end.state, end.gpu_seconds_reserved) == ("CANCELLED", 90.0)
    assert end.tflops == pytest.approx(82.6)
    assert end.usage == pytest.approx(90 * 82.6)
    assert [c.reason for c in run.of("UsageCharged") if c.job_id == "x"] == ["job_end"]
