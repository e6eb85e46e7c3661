"""LLM backfill in the simulator (SPEC B1–B5, R2)."""

from __future__ import annotations

import pytest

from jpu.domain.idle import backfill_id
from jpu.testing.simkit import Simulate

TWO_GPUS = [{"name": "n1", "gpus": {"rtx4090": 2}}]


def job(id: str, submit_s: float, num_gpus: int, duration_s: float) -> dict[str, object]:
    return {"id": id, "lab": "L", "user": id, "submit_s": submit_s, "num_gpus": num_gpus,
            "duration_s": duration_s}  # fmt: skip


def test_B1_B2_B5_backfill_after_settle_preempted_by_dispatch_never_charged(
    simulate: Simulate,
) -> None:
    run = simulate([job("a", 0, 1, 100), job("b", 500, 1, 100)], nodes=TWO_GPUS, backfill=True,
                   backfill_settle_s=60)  # fmt: skip
    started = run.of("BackfillStarted")
    # B1: GPU 1 idle since t=0 → backfill at 60; GPU 0 freed at 100 → backfill at 160 (B3)
    assert [(e.ts, e.gpu) for e in started] == [(60.0, 1), (160.0, 0)]
    # B2: b's dispatch at 500 preempts the backfill on its GPU first, at the same instant
    names = [(type(e).__name__, e.ts) for e in run.events if e.ts == 500.0]
    i_end = names.index(("BackfillEnded", 500.0))
    assert names[i_end + 1] == ("JobDispatched", 500.0)
    # B5: only the two research jobs are charged
    assert [c.job_id for c in run.of("UsageCharged")] == ["a", "b"]
    util = run.summary["gpu_utilization"]
    assert util["research"] == pytest.approx(200 / (2 * 600))
    # backfill GPU-seconds up to the end (600): GPU1 60→600, GPU0 160→500 (then b), b ends at 600
    assert util["with_backfill"] == pytest.approx((200 + 540 + 340) / (2 * 600))


def test_R2_backfill_keeps_running_on_reserved_gpu_until_dispatch(simulate: Simulate) -> None:
    jobs = [job("a", 0, 1, 1000), job("wide", 10, 2, 100)]
    run = simulate(jobs, nodes=TWO_GPUS, backfill=True, backfill_settle_s=5)
    # GPU 1 is backfilled at 5; wide reserves it at 10 (R1) and backfill goes on (R2)
    first = run.of("BackfillStarted")[0]
    assert (first.ts, first.gpu) == (5.0, 1)
    assert run.of("ReservationStarted", "wide")[0].ts == 10.0
    ended = run.of("BackfillEnded")[0]
    assert (ended.ts, ended.gpu, ended.reason) == (1000.0, 1, "preempted")
    assert run.of("JobDispatched", "wide")[0].ts == 1000.0


def test_backfill_off_starts_none(simulate: Simulate) -> None:
    run = simulate([job("a", 0, 1, 1000)], nodes=TWO_GPUS, backfill=False)
    assert not run.of("BackfillStarted")
    assert (
        run.summary["gpu_utilization"]["with_backfill"]
        == run.summary["gpu_utilization"]["research"]
    )


def test_B1_backfill_ids_are_the_backfill_services_one_per_free_period(
    simulate: Simulate,
) -> None:
    """The simulator names an instance as the backfill service does (jpu.domain.idle.backfill_id:
    the GPU and the log seq that freed it), not by a counter of its own."""
    run = simulate([job("a", 0, 1, 100), job("b", 500, 1, 100)], nodes=TWO_GPUS, backfill=True,
                   backfill_settle_s=60)  # fmt: skip
    seq = {id(e): n for n, e in enumerate(run.events, start=1)}  # the log's stream seq
    freed_gpu0 = seq[id(run.of("JobEnded", "a")[0])]
    gpu1, gpu0 = run.of("BackfillStarted")
    assert gpu1.backfill_id == backfill_id(("n1", "rtx4090", 1), 0)  # free from the start
    assert gpu0.backfill_id == backfill_id(("n1", "rtx4090", 0), freed_gpu0)
    assert gpu0.backend_job_id == f"sim-{gpu0.backfill_id}"
