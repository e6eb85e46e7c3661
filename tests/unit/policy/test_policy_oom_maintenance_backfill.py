"""SPEC X7–X8 (OOM), M1–M4 (maintenance), B1–B4 (backfill)."""

import pytest

from jpu.policy import cycle
from jpu.policy.backfill_plan import plan_backfill
from jpu.policy.maintenance import (
    Rejected,
    advance,
    backfill_allowed,
    dispatch_allowed,
    on_admin,
    reclaim_backfill,
    submit_allowed,
)
from jpu.policy.model import Gpu
from jpu.policy.oom import Fail, Retry, escalate, is_gpu_oom
from jpu.testing.policy_builders import (
    DEFAULT_TIERS,
    RTX3080,
    default_cluster,
    job,
    snap,
    tier,
    tiers,
)

# --- X7 / X8 ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: CUDA out of memory.",
        "CUDA_ERROR_OUT_OF_MEMORY",
        "cudaErrorMemoryAllocation: out of memory",
        "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying",
    ],
)
def test_X7_oom_markers(text):
    assert is_gpu_oom(True, f"step 1\n{text}\n")
    assert not is_gpu_oom(False, text)  # a job that succeeded is never an OOM


@pytest.mark.parametrize(
    "text",
    [
        "slurmstepd: error: Detected 1 oom_kill event. OUT_OF_MEMORY",  # host RAM: not escalated
        "RESOURCE_EXHAUSTED: quota exceeded",
        "Traceback: ValueError",
        "",
    ],
)
def test_X7_not_gpu_oom(text):
    assert not is_gpu_oom(True, text)


def test_X8_escalation_to_more_vram():
    gpus = default_cluster()
    r = escalate(1, 12, gpus, DEFAULT_TIERS, num_gpus=1, job_tiers=None, max_attempts=3)
    assert r == Retry(attempt=2, min_vram_gb=13)  # > 12: only rtx4090 (24 GB) fits now


def test_X8_escalation_fails_when_nothing_bigger_fits():
    gpus = default_cluster()
    r = escalate(1, 24, gpus, DEFAULT_TIERS, num_gpus=1, job_tiers=None, max_attempts=3)
    assert r == Fail("no_fit", 25) and r.reason == "OOM"
    only3080 = escalate(1, 12, gpus, DEFAULT_TIERS, 1, frozenset({"rtx3080ti"}), 3)
    assert only3080 == Fail("no_fit", 13)
    off = tiers(tier("rtx4090", 24, 82.6, 20, active=False), RTX3080)
    assert escalate(1, 12, gpus, off, 1, None, 3) == Fail("no_fit", 13)  # only active ones


def test_X8_escalation_fails_past_max_attempts():
    gpus = default_cluster()
    assert escalate(3, 12, gpus, DEFAULT_TIERS, 1, None, max_attempts=3) == Fail("max_attempts", 13)
    assert escalate(2, 12, gpus, DEFAULT_TIERS, 1, None, max_attempts=3) == Retry(3, 13)


def test_X8_retry_dispatches_only_on_bigger_vram():
    q = [job("x", n=1, vram=13, attempt=2)]
    r = cycle(
        snap(
            default_cluster(
                {
                    ("gpu-4090x2-01", 0): "job:a",
                    ("gpu-4090x2-01", 1): "job:b",
                    ("gpu-4090x2-02", 0): "job:c",
                    ("gpu-4090x2-02", 1): "job:d",
                }
            ),
            q,
        ),
        0,
    )
    assert r.dispatches == [] and r.pending == {"x": "MinVram"}  # 3080s idle but too small (D7)
    r = cycle(snap(default_cluster(), q), 0)
    assert r.dispatches[0].tier == "rtx4090" and r.dispatches[0].attempt == 2


ALL_4090_BUSY = {
    ("gpu-4090x2-01", 0): "job:a",
    ("gpu-4090x2-01", 1): "job:b",
    ("gpu-4090x2-02", 0): "job:c",
    ("gpu-4090x2-02", 1): "job:d",
}


def test_D7_X8_oom_retry_beside_idle_smaller_gpus_waits_for_MinVram():
    """D7: an OOM retry (min_vram_gb 13 after 12 GB, X8) with idle 3080 Ti (12 GB) waits for
    VRAM, not Resources; with those busy too, or excluded by its tiers, it is Resources."""
    retry = job("x", n=1, vram=13, attempt=2)
    assert cycle(snap(default_cluster(ALL_4090_BUSY), [retry]), 0).pending == {"x": "MinVram"}
    everything = {**ALL_4090_BUSY, **{(f"gpu-3080tix2-0{n}", i): "job:e" for n in (1, 2)
                                      for i in (0, 1)}}  # fmt: skip
    assert cycle(snap(default_cluster(everything), [retry]), 0).pending == {"x": "Resources"}
    only4090 = job("y", n=1, vram=13, tiers=["rtx4090"])
    assert cycle(snap(default_cluster(ALL_4090_BUSY), [only4090]), 0).pending == {
        "y": "Resources"
    }  # the 3080 Ti are not its tiers: VRAM is not what it waits for
    wide = job("w", n=2, vram=13)  # 2 idle 3080 Ti on one node: VRAM again
    assert cycle(snap(default_cluster(ALL_4090_BUSY), [wide]), 0).pending == {"w": "MinVram"}


# --- M1–M4 -----------------------------------------------------------------------------------


def test_M1_start_drains_and_blocks_submit_and_dispatch():
    assert on_admin("NORMAL", "start") == "DRAINING"
    assert not submit_allowed("DRAINING") and not dispatch_allowed("DRAINING")
    assert backfill_allowed("DRAINING")  # LLM backfill keeps running
    assert isinstance(on_admin("DRAINING", "start"), Rejected)


def test_M2_draining_to_backfill_recovery_when_no_user_job_active():
    assert advance("DRAINING", user_jobs_active=2, backfill_active=5) == "DRAINING"
    assert advance("DRAINING", user_jobs_active=0, backfill_active=5) == "BACKFILL_RECOVERY"
    assert reclaim_backfill("BACKFILL_RECOVERY") and not backfill_allowed("BACKFILL_RECOVERY")


def test_M3_recovery_to_active_when_no_backfill_left():
    assert advance("BACKFILL_RECOVERY", 0, 1) == "BACKFILL_RECOVERY"
    assert advance("BACKFILL_RECOVERY", 0, 0) == "ACTIVE"
    assert advance("ACTIVE", 0, 0) == "ACTIVE"  # one step at a time, then stable
    assert advance("DRAINING", 0, 0) == "BACKFILL_RECOVERY"  # recorded, even if instant


def test_M4_end_returns_to_normal():
    assert on_admin("ACTIVE", "end") == "NORMAL"
    assert on_admin("DRAINING", "end") == "NORMAL"  # an operator may call off a drain
    assert isinstance(on_admin("NORMAL", "end"), Rejected)
    assert isinstance(on_admin("NORMAL", "reboot"), Rejected)
    assert submit_allowed("NORMAL") and dispatch_allowed("NORMAL")


# --- B1–B4 -----------------------------------------------------------------------------------


def _pool():
    return [
        Gpu("n1", "rtx4090", 0),  # free long enough
        Gpu("n1", "rtx4090", 1),  # free, not settled
        Gpu("n2", "rtx4090", 0, "reserved:j", backfill="bfR"),  # R2: keeps its backfill
        Gpu("n2", "rtx4090", 1, "backfill:bf1"),
        Gpu("n3", "rtx4090", 0, "job:x"),
        Gpu("n3", "rtx4090", 1, "down"),
        Gpu("n4", "rtx4090", 0),  # free, idle start unknown
    ]


def _since():
    keys = [
        ("n1", "rtx4090", 0),
        ("n1", "rtx4090", 1),
        ("n2", "rtx4090", 0),
        ("n3", "rtx4090", 0),
        ("n3", "rtx4090", 1),
    ]
    return dict(zip(keys, [0.0, 50.0, 0.0, 0.0, 0.0], strict=True))


def test_B1_start_on_gpus_free_for_settle_time():
    plan = plan_backfill(_pool(), _since(), now=60.0, settle_s=60.0, maintenance_state="NORMAL")
    assert [(g.node, g.index) for g in plan.start] == [("n1", 0)]
    assert plan.reclaim == []


def test_B1_reserved_gpu_gets_no_new_backfill_and_draining_still_allows():
    plan = plan_backfill(_pool(), _since(), now=1e6, settle_s=60.0, maintenance_state="DRAINING")
    assert [(g.node, g.index) for g in plan.start] == [("n1", 0), ("n1", 1)]


def test_B2_dispatch_preempts_backfill():
    gpus = default_cluster(
        {("gpu-4090x2-01", 0): "backfill:bfA", ("gpu-4090x2-01", 1): "backfill:bfB"}
    )
    r = cycle(snap(gpus, [job("x", n=2)]), 0)
    assert r.dispatches[0].preempt_backfill == ("bfA", "bfB")


def test_B3_after_gpus_free_backfill_waits_settle_again():
    plan = plan_backfill(_pool(), {("n1", "rtx4090", 0): 100.0}, 130.0, 60.0, "NORMAL")
    assert plan.start == []


def test_B4_backfill_counts_as_idle_for_dispatch():
    busy = {
        (n, i): "job:z"
        for n in ("gpu-4090x2-02", "gpu-3080tix2-01", "gpu-3080tix2-02")
        for i in (0, 1)
    }
    gpus = default_cluster(
        busy | {("gpu-4090x2-01", 0): "backfill:b", ("gpu-4090x2-01", 1): "job:y"}
    )
    r = cycle(snap(gpus, [job("x", n=1)]), 0)
    assert [(d.node, d.gpus, d.preempt_backfill) for d in r.dispatches] == [
        ("gpu-4090x2-01", (0,), ("b",))
    ]


def test_M2_recovery_reclaims_every_backfill():
    for state in ("BACKFILL_RECOVERY", "ACTIVE"):
        plan = plan_backfill(_pool(), _since(), 1e6, 60.0, state)
        assert plan.start == [] and sorted(plan.reclaim) == ["bf1", "bfR"]
