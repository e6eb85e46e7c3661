"""SPEC R7 through the simulator (`reservation_backfill: limit`): the loan in the log, its
charging (F5), the reserving job's start, and what `jpu why` says of both jobs."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpu.bus import Delivered
from jpu.config import load_config
from jpu.explain.wait import wait_timeline
from jpu.testing.simkit import Simulate

ONE_4090_NODE = [{"name": "n1", "gpus": {"rtx4090": 2}}]
TFLOPS = 82.6


def job(id: str, user: str, submit_s: float, num_gpus: int, duration_s: float, limit: float):
    return {"id": id, "lab": "A", "user": user, "submit_s": submit_s, "num_gpus": num_gpus,
            "duration_s": duration_s, "time_limit_s": limit}  # fmt: skip


JOBS = [
    job("y", "u1", 0, 1, 600, 600),  # runs on GPU 0 until 600: x's shadow time
    job("x", "u2", 1, 2, 100, 3600),  # rank 1 at t=1: reserves GPU 1, waits for GPU 0
    job("b", "u3", 2, 1, 200, 300),  # limit ends at 302 ≤ 600: borrows GPU 1, ends at 202
]


@pytest.mark.parametrize("mode", ["off", "limit"])
def test_R7_simulator_lends_and_the_reserving_job_starts_when_it_would_have(
    simulate: Simulate, mode: str
) -> None:
    run = simulate(JOBS, nodes=ONE_4090_NODE, half_life_s=1e12, reservation_backfill=mode)
    assert run.of("JobDispatched", "x")[0].ts == 600.0  # y's end, in both modes
    lent = [e for e in run.of("ReservationShrunk", "x") if e.reason == "lent"]
    b = run.of("JobDispatched", "b")[0]
    if mode == "off":
        assert lent == [] and b.ts == 700.0  # behind x (D5), after x's 100 s
        return
    [sh] = lent
    assert (sh.ts, sh.removed, sh.gpus, sh.lent_to, sh.until) == (2.0, [1], [], "b", 600.0)
    assert (b.ts, b.gpus) == (2.0, [1])
    grown = run.of("ReservationGrown", "x")
    assert [(e.ts, e.added) for e in grown] == [(202.0, [1])]  # it grows back when b ends
    # F5: x's reserved GPU-seconds are 1..2 and 202..600 on GPU 1, b's run 2..202: once each
    x_end = run.of("JobEnded", "x")[0]
    assert x_end.gpu_seconds_reserved == pytest.approx(1.0 + 398.0)
    assert run.job("b")["charged_tflop_s"] == pytest.approx(200.0 * TFLOPS)
    assert run.job("x")["charged_tflop_s"] == pytest.approx((399.0 + 2 * 100.0) * TFLOPS)


def test_R7_jpu_why_says_the_job_started_under_a_reservation(simulate: Simulate) -> None:
    run = simulate(JOBS, nodes=ONE_4090_NODE, half_life_s=1e12, reservation_backfill="limit")
    config = load_config(Path(run.out).parent / "cluster.yaml", env={})
    log = [Delivered(i + 1, "sim", e, {}) for i, e in enumerate(run.events)]
    b = wait_timeline(log, "b", config)
    [lent] = [s.cause for s in b.steps if s.cause is not None and s.cause.kind == "dispatched_lent"]
    assert (lent.jobs, lent.node, lent.gpus) == (["x"], "n1", [1])
    [span] = wait_timeline(log, "x", config).reservations
    assert (span.lent_to, span.reason) == (["b"], "dispatched")
