"""Baselines with the policy signature: greedy FIFO and Slurm-like (multifactor + EASY)."""

from jpu.policy import POLICIES, cycle, fifo_cycle, slurm_like_cycle
from jpu.testing.policy_builders import default_cluster, job, running, snap

A1, A2, B1, B2 = "gpu-4090x2-01", "gpu-4090x2-02", "gpu-3080tix2-01", "gpu-3080tix2-02"


def test_all_policies_share_one_signature():
    assert {"jpu": cycle, "fifo": fifo_cycle, "slurm-like": slurm_like_cycle} == POLICIES
    s = snap(default_cluster(), [job("x", n=2), job("y", n=1, at=1)])
    for policy in POLICIES.values():
        r = policy(s, 0.0)
        assert {d.job_id for d in r.dispatches} == {"x", "y"}


def test_fifo_ignores_usage_and_skips_what_does_not_fit():
    busy = {(n, i): "job:r" for n in (A2, B1, B2) for i in (0, 1)} | {(A1, 0): "job:r"}
    q = [job("big", "A", n=2, at=0), job("small", "B", n=1, at=1)]
    r = fifo_cycle(snap(default_cluster(busy), q, {"A": 1e9}), 0)
    assert r.order == ["big", "small"]  # by entry time only
    assert [d.job_id for d in r.dispatches] == ["small"]  # skipped, not blocked
    assert r.starts == [] and r.pending == {"big": "Resources"}


def _easy_case():
    states = {(A1, 0): "job:r1", (A2, 0): "job:r2", (A2, 1): "job:r2"}
    states |= {(n, i): "job:r3" for n in (B1, B2) for i in (0, 1)}
    run = [
        running("r1", A1, "rtx4090", (0,), started=0.0, limit=100.0),
        running("r2", A2, "rtx4090", (0, 1), started=0.0, limit=1000.0),
        running("r3", B1, "rtx3080ti", (0, 1), started=0.0, limit=1000.0),
    ]
    return default_cluster(states), run


def test_slurm_like_easy_backfill_short_job_may_use_shadow_gpus():
    gpus, run = _easy_case()
    q = [job("top", "A", n=2, tiers=["rtx4090"], at=0), job("short", "B", n=1, at=1, limit=50)]
    r = slurm_like_cycle(snap(gpus, q, {"A": 0, "B": 1e6}, run=run), now=0.0)
    assert r.order == ["top", "short"]
    assert [(d.job_id, d.node) for d in r.dispatches] == [("short", A1)]  # ends by t=50 < 100


def test_slurm_like_easy_backfill_long_job_may_not_delay_the_top_job():
    gpus, run = _easy_case()
    q = [job("top", "A", n=2, tiers=["rtx4090"], at=0), job("long", "B", n=1, at=1, limit=500)]
    r = slurm_like_cycle(snap(gpus, q, {"A": 0, "B": 1e6}, run=run), now=0.0)
    assert r.dispatches == []
    assert set(r.pending) == {"top", "long"}


def test_slurm_like_priority_is_fair_share_then_age():
    busy = {(n, i): "job:r" for n in (A1, A2, B1, B2) for i in (0, 1)}
    q = [job("heavy", "A", at=0), job("light", "B", at=10)]
    r = slurm_like_cycle(snap(default_cluster(busy), q, {"A": 1e6, "B": 0}), now=20.0)
    assert r.order == ["light", "heavy"]
    r = slurm_like_cycle(snap(default_cluster(busy), q, {"A": 1, "B": 1}), now=20.0)
    assert r.order == ["heavy", "light"]  # equal shares: older first


def test_baselines_respect_maintenance():
    for policy in (fifo_cycle, slurm_like_cycle):
        r = policy(snap(default_cluster(), [job("x")], maintenance="DRAINING"), 0.0)
        assert r.dispatches == [] and r.pending == {"x": "Maintenance"}
