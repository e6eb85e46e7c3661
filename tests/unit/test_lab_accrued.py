"""What a lab's jobs in flight have accrued but not been charged (SPEC F1, F4), shown beside the
charged usage that orders the queue (D1): the API's figure and the CLI's columns."""

from __future__ import annotations

import pytest

from jpu.cli.rest import jobviews as rest_jobviews
from jpu.cli.rest import views as rest_views
from jpu.config import load_config
from jpu.policy.fairshare import accrued, cost
from jpu_services.gateway.routes._accrued import lab_accrued

T = 1_800_000_000.0


def test_F1_accrued_is_the_cost_of_what_is_held_so_far():
    assert accrued(2, T - 1800, T, 82.6) == cost(2, 1800, 82.6) == 297_360.0
    assert accrued(1, T + 5, T, 82.6) == 0.0  # a clock a little behind: nothing, never negative


def test_F4_lab_accrued_counts_running_attempts_and_reservations_not_the_queue():
    """Lab A runs 3 GPUs for 10 min (2 × rtx4090, 1 × rtx3080ti) and holds nothing else; lab B
    reserves 1 GPU since 5 min; a plain queued job and an ended one hold nothing."""
    tiers = {t.name: t for t in load_config(env={}).tiers}
    rows = [
        {"lab": "A", "state": "RUNNING", "num_gpus": 2, "tier": "rtx4090", "gpus": [0, 1],
         "dispatched_at": T - 600},
        {"lab": "A", "state": "DISPATCHED", "num_gpus": 1, "tier": "rtx3080ti", "gpus": [0],
         "dispatched_at": T - 600},
        {"lab": "B", "state": "RESERVING", "num_gpus": 2, "reservation_tier": "rtx4090",
         "reservation_gpus": [1], "reservation_since": T - 300},
        {"lab": "C", "state": "GLOBAL_QUEUE_WAIT", "num_gpus": 1},
        {"lab": "C", "state": "COMPLETED", "num_gpus": 1, "tier": "rtx4090", "gpus": [0],
         "dispatched_at": T - 9000},
    ]  # fmt: skip
    got = lab_accrued(rows, tiers, T)
    a = 2 * 600 * tiers["rtx4090"].tflops + 600 * tiers["rtx3080ti"].tflops
    assert got == {"A": pytest.approx(a), "B": pytest.approx(300 * tiers["rtx4090"].tflops)}


def test_F4_queue_and_usage_tables_show_charged_and_accrued_apart():
    """The queue's LAB_USAGE read 0 for a lab running 3 GPUs: it is the charged usage (what
    orders the queue), so it stays, labelled as charged, beside what is accrued uncharged."""
    entry = {"rank": None, "job_id": "r", "lab": "A", "num_gpus": 3, "state": "RUNNING",
             "lab_usage": 0.0, "lab_accrued_uncharged": 148_680.0}  # fmt: skip
    lines = rest_jobviews.queue({"queue": [], "running": [entry]}).splitlines()
    head, row = lines[0].split(), lines[1].split()
    assert row[head.index("LAB_USAGE(CHARGED)")] == "0"
    assert row[head.index("ACCRUED(UNCHARGED)")] == "148,680"
    lab = {"lab": "A", "usage": 0.0, "accrued_uncharged": 148_680.0, "running": 2}
    out = rest_views.labs({"labs": [lab]})
    head, row = out.splitlines()[0].split(), out.splitlines()[1].split()
    assert (row[head.index("USAGE_NOW")], row[head.index("ACCRUED(UNCHARGED)")]) == ("0", "148,680")
    assert "what orders the queue" in out and "charged when they end" in out
