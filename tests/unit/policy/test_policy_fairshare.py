"""SPEC F1–F6: cost, half-life decay, lazy charging."""

import pytest

from jpu.policy import attempt_cost, charge, cost, decayed
from jpu.policy.fairshare import held_gpu_seconds
from jpu.policy.model import LabUsage, Reservation
from jpu.testing.policy_builders import RTX4090

WEEK = 7 * 24 * 3600.0


def test_F1_one_4090_hour_is_297360():
    assert cost(1, 3600, RTX4090.tflops) == 297_360


def test_F2_run_plus_reservation_is_346920():
    # 2 GPUs running 30 min + 1 GPU reserved 10 min on rtx4090
    assert attempt_cost(2, 30 * 60, 1 * 10 * 60, RTX4090.tflops) == 346_920
    assert cost(2, 1800, 82.6) + cost(1, 600, 82.6) == pytest.approx(346_920, rel=1e-12)


@pytest.mark.parametrize(
    ("elapsed", "expected"),
    [(0, 1000.0), (WEEK, 500.0), (2 * WEEK, 250.0), (WEEK / 2, 1000 * 0.5**0.5)],
)
def test_F3_half_life_decay(elapsed, expected):
    assert decayed(LabUsage(1000.0, 100.0), 100.0 + elapsed, WEEK) == pytest.approx(expected)


def test_F3_charge_decays_then_adds():
    u = charge(LabUsage(1000.0, 0.0), 10.0, WEEK, WEEK)
    assert u == LabUsage(510.0, WEEK)


def test_F3_decay_never_runs_backwards():
    u = LabUsage(1000.0, 50.0)
    assert decayed(u, 10.0, WEEK) == 1000.0
    late = charge(u, 5.0, 10.0, WEEK)  # a charge dated before as_of lands at as_of, in full
    assert late == LabUsage(1005.0, 50.0)


def test_F5_grown_reservation_counts_each_gpu_from_its_own_start():
    r = Reservation(node="n", tier="t", gpus=(0, 1), since=0.0, joined=(0.0, 60.0))
    assert held_gpu_seconds(r, 100.0) == 100.0 + 40.0
    assert held_gpu_seconds(Reservation("n", "t", (0, 1), 0.0), 100.0) == 200.0


def test_F6_unknown_lab_has_zero_usage():
    assert decayed(LabUsage(), 1e9, WEEK) == 0.0
