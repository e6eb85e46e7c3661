"""One test per dispatch rule (SPEC D, R, P, T, Q2), on the default cluster (§1.1).

Default cluster: gpu-4090x2-01/02 (2 × rtx4090 each), gpu-3080tix2-01/02 (2 × rtx3080ti each).
"""

from jpu.policy import cycle, ever_fits, placements
from jpu.policy.model import Gpu, LabUsage, Reservation
from jpu.testing.policy_builders import (
    DEFAULT_TIERS,
    RTX3080,
    RTX4090,
    cluster,
    default_cluster,
    job,
    reserved,
    snap,
    tier,
    tiers,
)

A1, A2, B1, B2 = "gpu-4090x2-01", "gpu-4090x2-02", "gpu-3080tix2-01", "gpu-3080tix2-02"
BUSY_ALL = {(n, i): f"job:r-{n}-{i}" for n in (A1, A2, B1, B2) for i in (0, 1)}


def busy_except(*free: tuple[str, int], **states: str) -> dict[tuple[str, int], str]:
    s = {k: v for k, v in BUSY_ALL.items() if k not in free}
    return s


def placed(result):
    return {d.job_id: (d.node, d.gpus) for d in result.dispatches}


# --- D1 order --------------------------------------------------------------------------------


def test_D1_order_usage_then_entry_then_id():
    q = [job("c", "A", at=5), job("b", "B", at=1), job("a", "A", at=5), job("d", "A", at=2)]
    r = cycle(snap(default_cluster(BUSY_ALL), q, {"A": 10, "B": 20}), now=0)
    assert r.order == ["d", "a", "c", "b"]


def test_D1_labs_with_equal_usage_interleave_by_entry_time():
    q = [job("a1", "A", at=1), job("a2", "A", at=3), job("b1", "B", at=2), job("c1", "C", at=0)]
    r = cycle(snap(default_cluster(BUSY_ALL), q, {"C": 5}), now=0)
    assert r.order == ["a1", "b1", "a2", "c1"]  # A and B both at 0 (F6), C above


def test_D1_usage_is_decayed_at_cycle_time():
    week = 7 * 24 * 3600.0
    # A: 1000 two weeks ago -> 250 now; B: 300 now. A ranks first at `now`.
    u = {"A": LabUsage(1000.0, 0.0), "B": LabUsage(300.0, 2 * week)}
    r = cycle(snap(default_cluster(BUSY_ALL), [job("b", "B"), job("a", "A")], u), now=2 * week)
    assert r.order == ["a", "b"]


def test_D1_unsorted_input_queue_is_ranked_the_same():
    q = [job(f"j{i}", "AB"[i % 2], at=float(10 - i % 4)) for i in range(12)]
    s1 = snap(default_cluster(BUSY_ALL), q, {"A": 1})
    s2 = snap(default_cluster(BUSY_ALL), list(reversed(q)), {"A": 1})
    assert cycle(s1, 0).order == cycle(s2, 0).order


# --- D2 fit ----------------------------------------------------------------------------------


def test_D2_fit_tiers_filter_vram_and_max_gpus():
    gpus = default_cluster()
    q = [
        job("only3080", n=1, tiers=["rtx3080ti"], at=0),
        job("vram16", n=1, vram=16, at=1),
        job("three", n=3, at=2),  # max_gpus = 2 everywhere: never fits
    ]
    r = cycle(snap(gpus, q), 0)
    p = placed(r)
    assert p["only3080"][0].startswith("gpu-3080")
    assert p["vram16"][0].startswith("gpu-4090")
    assert r.pending == {"three": "Resources"}


def test_D2_capacity_excludes_down_gpus():
    gpus = default_cluster({(A1, 1): "down", (A2, 0): "down", (B1, 0): "down", (B2, 0): "down"})
    r = cycle(snap(gpus, [job("x", n=2)]), 0)
    assert r.dispatches == [] and r.starts == []
    assert r.pending == {"x": "Resources"}


# --- D3 phases -------------------------------------------------------------------------------


def test_D3_gpus_released_by_demotion_are_usable_in_the_same_cycle():
    res = reserved(A1, "rtx4090", (0,), since=0.0)
    gpus = default_cluster(busy_except((A1, 0), (A1, 1)) | {(A1, 0): "reserved:x"})
    q = [job("x", "BCG", n=2, at=0, res=res), job("z", "KDG", n=1, at=1)]
    r = cycle(snap(gpus, q, {"BCG": 100, "KDG": 1}), now=10)
    assert [(x.job_id, x.reason) for x in r.releases] == [("x", "demoted")]
    assert placed(r) == {"z": (A1, (0,))}  # best fit among A1's two idle GPUs: lowest index
    # x is rank 2 now: A1's other GPU is idle but x needs 2 and may not reserve (R1)
    assert r.pending == {"x": "Priority"}
    assert r.starts == []


# --- D4 placement choice ---------------------------------------------------------------------


def test_D4_best_fit_prefers_fewest_idle_that_still_fits():
    gpus = default_cluster({(A1, 0): "job:r1"})  # A1 has 1 idle, A2 has 2
    r = cycle(snap(gpus, [job("x", n=1)]), 0)
    assert placed(r) == {"x": (A1, (1,))}


def test_D4_tier_sort_order_before_best_fit():
    gpus = default_cluster({(B1, 0): "job:r1"})  # B1 (3080) is a tighter fit, but 4090 first
    r = cycle(snap(gpus, [job("x", n=1)]), 0)
    assert placed(r)["x"][0] == A1


def test_D4_node_name_breaks_ties():
    r = cycle(snap(default_cluster(), [job("x", n=2)]), 0)
    assert placed(r) == {"x": (A1, (0, 1))}


def test_D4_equal_sort_order_tiers_compete_on_fewest_idle():
    t1, t2 = tier("ta", 24, 10.0, 5), tier("tb", 24, 10.0, 5)
    gpus = cluster(("n1", "ta", 2), ("n2", "tb", 2), states={("n2", 0): "job:r"})
    r = cycle(snap(gpus, [job("x")], tier_map=tiers(t1, t2)), 0)
    assert placed(r) == {"x": ("n2", (1,))}


def test_D4_reservation_prefers_most_idle():
    three = tier("big", 48, 100.0, 30, max_gpus=4)
    gpus = cluster(
        ("n1", "big", 4),
        ("n2", "big", 4),
        states={("n1", 0): "job:a", ("n1", 1): "job:a", ("n1", 2): "job:a", ("n2", 0): "job:b"},
    )
    r = cycle(snap(gpus, [job("x", n=4)], tier_map=tiers(three)), 0)
    assert [(s.node, s.gpus) for s in r.starts] == [("n2", (1, 2, 3))]
    assert r.pending == {"x": "Reservation"}


def test_D4_own_reservation_preferred_whenever_available():
    # x holds A2 GPU 0; A2 GPU 1 frees; A1 also has 2 idle GPUs (a "better" node name)
    res = reserved(A2, "rtx4090", (0,), since=0.0)
    gpus = default_cluster({(A2, 0): "reserved:x"})
    r = cycle(snap(gpus, [job("x", n=2, res=res)]), now=60)
    assert placed(r) == {"x": (A2, (0, 1))}
    assert [(x.reason, x.charge_now) for x in r.releases] == [("dispatched", 0.0)]
    assert r.releases[0].gpu_seconds == 60.0  # reported, charged lazily with the attempt (F4)


def test_D4_free_gpus_before_backfilled_ones():
    gpus = default_cluster(busy_except((A1, 0), (A1, 1)) | {(A1, 0): "backfill:bf0"})
    r = cycle(snap(gpus, [job("x", n=1)]), 0)
    assert placed(r) == {"x": (A1, (1,))}
    assert r.dispatches[0].preempt_backfill == ()


# --- D5 no jumping ---------------------------------------------------------------------------


def test_D5_lower_job_cannot_take_what_higher_job_can_use():
    gpus = default_cluster(busy_except((A1, 0)))
    q = [job("hi", "A", n=1, at=5), job("lo", "B", n=1, at=0)]
    r = cycle(snap(gpus, q, {"A": 1, "B": 2}), 0)
    assert placed(r) == {"hi": (A1, (0,))}
    assert r.pending == {"lo": "Priority"}


def test_D5_lower_job_may_use_what_higher_job_cannot():
    gpus = default_cluster(busy_except((A1, 0)))
    q = [job("hi", "A", n=1, tiers=["rtx3080ti"]), job("lo", "B", n=1)]
    r = cycle(snap(gpus, q, {"A": 1, "B": 2}), 0)
    assert placed(r) == {"lo": (A1, (0,))}
    assert r.pending == {"hi": "Resources"}


def test_D5_reserved_gpus_are_not_idle_for_lower_jobs():
    res = reserved(A1, "rtx4090", (0,), since=0.0)
    gpus = default_cluster(busy_except((A1, 0)) | {(A1, 0): "reserved:x"})
    q = [job("x", "A", n=2, res=res), job("lo", "B", n=1)]
    r = cycle(snap(gpus, q, {"A": 1, "B": 2}), 10)
    assert r.dispatches == [] and r.releases == []
    assert r.pending == {"x": "Reservation", "lo": "Priority"}


# --- D6, D7 ----------------------------------------------------------------------------------


def test_D6_no_dispatch_in_maintenance():
    res = reserved(A1, "rtx4090", (0,), since=100.0)
    gpus = default_cluster({(A1, 0): "reserved:x"})
    q = [job("x", n=2, res=res), job("y", n=1)]
    for state in ("DRAINING", "BACKFILL_RECOVERY", "ACTIVE"):
        r = cycle(snap(gpus, q, maintenance=state), now=160.0)
        assert r.dispatches == [] and r.starts == [] and r.grows == []
        assert r.pending == {"x": "Maintenance", "y": "Maintenance"}
        # M1: reservations released, charged like R3
        assert [(x.reason, x.charge_now) for x in r.releases] == [("maintenance", 60 * 82.6)]


def test_D7_pending_reasons_every_queued_job_has_one():
    gpus = default_cluster(busy_except((A1, 0), (B1, 0)))
    q = [
        job("r1", "A", n=2, at=0),  # rank 1, no placement with 2 idle -> reserves A1/0
        job("p", "A", n=1, at=1),  # B1/0 left: dispatched
        job("q", "A", n=1, at=2),  # would fit A1/0, but r1 took it -> Priority
        job("big", "A", n=2, tiers=["rtx3080ti"], at=3),  # B1 idle+reserved < 2 -> Resources
    ]
    r = cycle(snap(gpus, q), 0)
    assert [s.job_id for s in r.starts] == ["r1"]
    assert placed(r) == {"p": (B1, (0,))}
    assert r.pending == {"r1": "Reservation", "q": "Priority", "big": "Resources"}
    assert set(r.pending) | set(placed(r)) == set(r.order)


# --- R reservations --------------------------------------------------------------------------


def test_R1_only_rank1_reserves():
    gpus = default_cluster(busy_except((A1, 0), (A2, 0)))
    q = [job("one", "A", n=2, at=0), job("two", "A", n=2, at=1)]
    r = cycle(snap(gpus, q), 0)
    assert [(s.job_id, s.node, s.gpus) for s in r.starts] == [("one", A1, (0,))]
    assert r.pending["two"] == "Resources"


def test_R1_single_gpu_jobs_never_reserve():
    r = cycle(snap(default_cluster(BUSY_ALL), [job("x", n=1)]), 0)
    assert r.starts == [] and r.pending == {"x": "Resources"}


def test_R2_reservation_grows_then_dispatches_and_preempts_backfill_on_reserved_gpu():
    res = reserved(A1, "rtx4090", (0,), since=0.0)
    states = busy_except((A1, 0), (A1, 1))
    g1 = default_cluster(states | {(A1, 0): "reserved:x", (A1, 1): "job:y"})
    g1 = [
        Gpu(g.node, g.tier, g.index, g.state, "bf7") if g.state == "reserved:x" else g for g in g1
    ]
    r = cycle(snap(g1, [job("x", n=2, res=res)]), 5)
    assert r.dispatches == [] and r.grows == [] and r.pending == {"x": "Reservation"}
    g2 = [Gpu(g.node, g.tier, g.index, "free") if g.state == "job:y" else g for g in g1]
    r = cycle(snap(g2, [job("x", n=2, res=res)]), 10)
    assert placed(r) == {"x": (A1, (0, 1))}
    assert r.dispatches[0].preempt_backfill == ("bf7",)  # B2: backfill on the reserved GPU


def test_R2_grow_absorbs_idle_gpus_of_its_placement():
    t4 = tier("big", 48, 100.0, 30, max_gpus=4)
    res = reserved("n1", "big", (0,), since=0.0)
    gpus = cluster(("n1", "big", 4), states={(("n1", 0)): "reserved:x", ("n1", 3): "job:y"})
    r = cycle(snap(gpus, [job("x", n=4, res=res)], tier_map=tiers(t4)), 10)
    assert [(g.gpus, g.added) for g in r.grows] == [((0, 1, 2), (1, 2))]
    assert r.pending == {"x": "Reservation"}


def test_R3_demotion_worked_example():
    # T+0: X (BCG, 2 GPUs) rank 1 reserved 1 of 2 rtx4090 of A1; Y (BCG, 1 GPU) runs on A1/1.
    # T+5min: Y ended, BCG charged to 32,000; KDG at 28,000 ranks above. Next cycle: X rank 2.
    res = reserved(A1, "rtx4090", (0,), since=0.0)
    gpus = default_cluster(busy_except((A1, 0), (A1, 1)) | {(A1, 0): "reserved:X"})
    q = [job("X", "BCG", n=2, at=-100.0, res=res), job("Z", "KDG", n=2, at=-50.0)]
    usage = {"BCG": LabUsage(32_000.0, 300.0), "KDG": LabUsage(28_000.0, 300.0)}
    r = cycle(snap(gpus, q, usage), now=300.0)
    assert r.order == ["Z", "X"]
    [rel] = r.releases
    assert (rel.job_id, rel.reason, rel.lab) == ("X", "demoted", "BCG")
    assert rel.gpu_seconds == 300.0
    assert rel.charge_now == 24_780.0  # 1 × 300 × 82.6, exactly
    # X's GPU is idle again: Z (rank 1) takes both GPUs of A1; X waits, queue_entered_at kept
    assert placed(r) == {"Z": (A1, (0, 1))}
    assert r.pending == {"X": "Priority"}
    # X may reserve again from zero when it is rank 1 again
    gpus2 = default_cluster(busy_except((A2, 1)))
    r2 = cycle(snap(gpus2, [job("X", "BCG", n=2, at=-100.0)], usage), now=310.0)
    assert [(s.job_id, s.node, s.gpus) for s in r2.starts] == [("X", A2, (1,))]


def test_R4_swap_releases_uncharged():
    # X reserves A1/0 (A1/1 busy); placement B (A2) frees 2 GPUs at once
    res = reserved(A1, "rtx4090", (0,), since=0.0)
    states = busy_except((A1, 0), (A2, 0), (A2, 1)) | {(A1, 0): "reserved:X"}
    q = [job("X", "A", n=2, res=res), job("w", "A", n=1, at=1)]
    r = cycle(snap(default_cluster(states), q), now=120.0)
    assert placed(r) == {"X": (A2, (0, 1)), "w": (A1, (0,))}  # freed GPU reused at once
    [rel] = r.releases
    assert (rel.reason, rel.charge_now, rel.gpu_seconds) == ("swap", 0.0, 120.0)


def test_R5_capacity_loss_releases_and_charges():
    res = reserved(A1, "rtx4090", (0,), since=0.0)
    gpus = default_cluster(busy_except((A1, 0)) | {(A1, 0): "reserved:X", (A1, 1): "down"})
    r = cycle(snap(gpus, [job("X", n=2, res=res)]), now=100.0)
    [rel] = r.releases
    assert (rel.reason, rel.charge_now) == ("capacity", 100 * 82.6)
    assert r.starts == []  # nowhere else has an idle GPU; A1 now has capacity 1 < 2


def test_R5_reserved_gpu_down_releases():
    res = reserved(A1, "rtx4090", (0,), since=0.0)
    gpus = default_cluster(busy_except() | {(A1, 0): "down"})
    r = cycle(snap(gpus, [job("X", n=2, res=res)]), now=10.0)
    assert [x.reason for x in r.releases] == ["capacity"]


BIG = tiers(tier("rtx4090", 24, 82.6, 20, max_gpus=4), RTX3080)  # one 4-GPU placement


def test_R5_one_lost_reserved_gpu_leaves_and_the_rest_is_kept():
    """Capacity still >= num_gpus, so only the lost GPU leaves (R5)."""
    res = Reservation("big", "rtx4090", (0, 1), since=0.0, joined=(0.0, 40.0))
    states = {
        ("big", 0): "reserved:X",
        ("big", 1): "down",
        ("big", 2): "job:y",
        ("big", 3): "job:z",
    }
    gpus = cluster(("big", "rtx4090", 4), states=states)
    r = cycle(snap(gpus, [job("X", n=3, res=res)], tier_map=BIG), now=100.0)
    assert r.releases == [] and r.dispatches == []
    [sh] = r.shrinks
    assert (sh.job_id, sh.gpus, sh.removed) == ("X", (0,), (1,))
    assert sh.gpu_seconds == 60.0 and sh.tflops == 82.6  # GPU 1 joined at 40: 60 s held
    assert r.pending["X"] == "Reservation"  # still reserving, with what it kept


def test_R5_a_kept_shrunk_reservation_dispatches_with_what_it_kept():
    res = Reservation("big", "rtx4090", (0, 1), since=0.0, joined=(0.0, 40.0))
    states = {("big", 0): "reserved:X", ("big", 1): "down"}  # 2 and 3 free: 0 + 2 + 3 = 3
    big = cluster(("big", "rtx4090", 4), states=states)
    r = cycle(snap(big, [job("X", n=3, res=res)], tier_map=BIG), 100.0)
    assert [sh.removed for sh in r.shrinks] == [(1,)]
    [rel] = r.releases
    assert (rel.reason, rel.gpu_seconds) == ("dispatched", 100.0)  # GPU 0 only; GPU 1 in sh
    assert sorted(r.dispatches[0].gpus) == [0, 2, 3]


# --- T tiers, P placements, Q2 ---------------------------------------------------------------


def test_T1_T2_best_tier_first_and_inactive_tier_gets_nothing():
    off = tier("rtx4090", 24, 82.6, 20, active=False)
    tm = tiers(off, RTX3080)
    r = cycle(snap(default_cluster(), [job("x", n=2), job("y", n=1)], tier_map=tm), 0)
    assert {n for n, _ in placed(r).values()} <= {B1, B2}
    res = reserved(A1, "rtx4090", (0,), since=0.0)
    gpus = default_cluster(busy_except((A1, 0)) | {(A1, 0): "reserved:x"})
    r = cycle(snap(gpus, [job("x", n=2, res=res)], tier_map=tm), 50.0)
    assert [(x.reason, x.charge_now) for x in r.releases] == [("capacity", 50 * 82.6)]
    assert r.starts == []  # T2: no reservation on the inactive tier either


def test_P1_P2_placements_group_by_node_and_tier():
    # one node with 2 × 4090 and 4 × 3080 Ti is two placements
    gpus = [
        Gpu("mix", "rtx4090", 0, "backfill:b1"),
        Gpu("mix", "rtx4090", 1, "reserved:j"),
        Gpu("mix", "rtx3080ti", 0),
        Gpu("mix", "rtx3080ti", 1),
        Gpu("mix", "rtx3080ti", 2, "down"),
        Gpu("mix", "rtx3080ti", 3, "job:k"),
    ]
    ps = {(p.node, p.tier): p for p in placements(gpus, DEFAULT_TIERS)}
    p4, p3 = ps[("mix", "rtx4090")], ps[("mix", "rtx3080ti")]
    assert (p4.capacity, p4.idle, p4.reserved_by, p4.backfill) == (2, (0,), {"j": (1,)}, {0: "b1"})
    assert (p3.capacity, p3.idle, p3.running) == (3, (0, 1), ("k",))


def test_P3_multi_gpu_job_never_spans_placements():
    gpus = default_cluster(busy_except((A1, 0), (A2, 0)))
    r = cycle(snap(gpus, [job("x", "A", n=2, at=0), job("y", "B", n=2, at=1)], {"B": 1}), 0)
    assert r.dispatches == []


def test_Q2_no_fit():
    gpus = default_cluster(BUSY_ALL)  # load is ignored
    assert ever_fits(job("x", n=2), gpus, DEFAULT_TIERS)
    assert not ever_fits(job("x", n=3), gpus, DEFAULT_TIERS)  # max_gpus 2
    assert not ever_fits(job("x", n=1, vram=32), gpus, DEFAULT_TIERS)
    assert not ever_fits(job("x", n=1, tiers=["h100"]), gpus, DEFAULT_TIERS)
    off = tiers(tier("rtx4090", 24, 82.6, 20, active=False), RTX3080)
    assert not ever_fits(job("x", n=1, vram=16), gpus, off)  # only the inactive tier had 24 GB
    down = default_cluster({(A1, 1): "down", (A2, 1): "down"})
    assert not ever_fits(job("x", n=2, tiers=[RTX4090.name]), down, DEFAULT_TIERS)
