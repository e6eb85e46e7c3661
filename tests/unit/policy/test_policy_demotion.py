"""SPEC R3/R6: the reservation demotion modes on hand-made clusters whose right answer is known.

Default cluster (§1.1): gpu-4090x2-01/02 (A1, A2: 2 × rtx4090), gpu-3080tix2-01/02 (B1, B2).
In each case X (lab BCG, 2 GPUs) holds a reservation and KDG, with less usage, now ranks above.
"""

from __future__ import annotations

import msgspec
import pytest

from jpu.config import DEMOTION_MODES, ConfigError, load_config
from jpu.policy import cycle
from jpu.policy.demotion import beyond_margin
from jpu.policy.model import Gpu, LabUsage, QueuedJob, Reservation, Snapshot
from jpu.testing.policy_builders import default_cluster, job, reserved, snap, tier
from jpu.testing.policy_reference import ref_cycle

A1, A2, B1, B2 = "gpu-4090x2-01", "gpu-4090x2-02", "gpu-3080tix2-01", "gpu-3080tix2-02"
BUSY = {(n, i): f"job:r-{n}-{i}" for n in (A1, A2, B1, B2) for i in (0, 1)}
USAGE = {"BCG": LabUsage(32_000.0, 300.0), "KDG": LabUsage(28_000.0, 300.0)}
RES_X = reserved(A1, "rtx4090", (0,), since=0.0)


def states(*free: tuple[str, int]) -> dict[tuple[str, int], str]:
    s = {k: v for k, v in BUSY.items() if k not in free}
    return s | {(A1, 0): "reserved:X"}


def with_mode(s: Snapshot, mode: str, margin: float = 0.1) -> Snapshot:
    return msgspec.structs.replace(
        s,
        reservation_demotion=mode,  # type: ignore[arg-type]
        reservation_demotion_margin=margin,
    )


def worked_example() -> Snapshot:
    """SPEC R3's example at T+5min+ε: Y ended (A1/1 free), KDG's Z now ranks above X."""
    q = [job("X", "BCG", n=2, at=-100.0, res=RES_X), job("Z", "KDG", n=2, at=-50.0)]
    return snap(default_cluster(states((A1, 1))), q, USAGE)


@pytest.mark.parametrize("mode", ["strict", "useful", "hysteresis", "damped", "yield"])
def test_R3_worked_example_demotes_and_charges_24780(mode):
    # Z could start on A1 with X's GPU and nowhere else; KDG is 12.5 % below BCG (> 10 %);
    # `yield`: Z needs X's only GPU, nothing would be left, so it is R3
    r = cycle(with_mode(worked_example(), mode), now=300.0)
    assert r.order == ["Z", "X"]
    [rel] = r.releases
    assert (rel.job_id, rel.reason, rel.lab) == ("X", "demoted", "BCG")
    assert rel.charge_now == 24_780.0  # 1 × 300 × 82.6, exactly
    assert {d.job_id: (d.node, d.gpus) for d in r.dispatches} == {"Z": (A1, (0, 1))}


def test_R6_strict_is_the_default_everywhere():
    assert Snapshot(tiers={}, gpus=[], queue=[], usage={}).reservation_demotion == "strict"
    assert load_config(env={}).reservation_demotion == "strict"
    assert set(DEMOTION_MODES) == {"strict", "useful", "hysteresis", "damped", "yield"}


def test_R6_useful_keeps_a_reservation_the_higher_job_cannot_use_tier():
    # Z only admits rtx3080ti: releasing X's rtx4090 GPU would help no one
    q = [
        job("X", "BCG", n=2, at=-100.0, res=RES_X),
        job("Z", "KDG", n=2, at=-50.0, tiers=["rtx3080ti"]),
    ]
    s = snap(default_cluster(states((A1, 1), (B1, 0))), q, USAGE)
    strict = cycle(s, now=300.0)
    assert [r.reason for r in strict.releases] == ["demoted"]
    r = cycle(with_mode(s, "useful"), now=300.0)
    # X is parked and grows on the idle A1/1 nobody above can use → complete → dispatched (D3.b);
    # its held time rides with the attempt (F4), nothing is charged now
    assert [(x.reason, x.charge_now) for x in r.releases] == [("dispatched", 0.0)]
    assert {d.job_id: (d.node, d.gpus) for d in r.dispatches} == {"X": (A1, (0, 1))}
    # Z, rank 1, reserves the idle 3080 Ti GPU (R1: only rank 1 starts one)
    assert [(x.job_id, x.node, x.gpus) for x in r.starts] == [("Z", B1, (0,))]


def test_R6_useful_keeps_a_reservation_too_small_for_the_higher_job():
    # X holds 1 GPU of A1, A1/1 busy; Z needs 2: X's GPU alone cannot start it
    q = [job("X", "BCG", n=2, at=-100.0, res=RES_X), job("Z", "KDG", n=2, at=-50.0)]
    s = with_mode(snap(default_cluster(states((B2, 1))), q, USAGE), "useful")
    r = cycle(s, now=300.0)
    assert r.releases == [] and r.dispatches == []
    assert [(x.job_id, x.node, x.gpus) for x in r.starts] == [("Z", B2, (1,))]  # R1, R2
    assert r.pending == {"Z": "Reservation", "X": "Reservation"}  # D7


def test_R6_useful_keeps_a_reservation_when_the_higher_job_starts_elsewhere():
    # a 1-GPU job above X fits on the free B1/0: X's GPU is not needed
    q = [job("X", "BCG", n=2, at=-100.0, res=RES_X), job("z", "KDG", n=1, at=-50.0)]
    s = snap(default_cluster(states((B1, 0))), q, USAGE)
    assert [r.reason for r in cycle(s, now=300.0).releases] == ["demoted"]  # strict
    r = cycle(with_mode(s, "useful"), now=300.0)
    assert r.releases == []
    assert {d.job_id: (d.node, d.gpus) for d in r.dispatches} == {"z": (B1, (0,))}
    assert r.pending == {"X": "Reservation"}


def test_R6_useful_demotes_when_a_1gpu_job_above_has_nowhere_else():
    q = [job("X", "BCG", n=2, at=-100.0, res=RES_X), job("z", "KDG", n=1, at=-50.0)]
    r = cycle(with_mode(snap(default_cluster(states()), q, USAGE), "useful"), now=300.0)
    [rel] = r.releases
    assert (rel.reason, rel.charge_now) == ("demoted", 24_780.0)
    assert {d.job_id: (d.node, d.gpus) for d in r.dispatches} == {"z": (A1, (0,))}  # D5


def test_R6_hysteresis_boundary():
    # KDG 28,000 vs BCG 32,000: KDG is exactly 12.5 % below. Demote only if strictly beyond.
    assert beyond_margin(32_000.0, 28_000.0, 0.12)
    assert not beyond_margin(32_000.0, 28_000.0, 0.125)  # 32,000 × 0.875 = 28,000 exactly
    s = worked_example()
    r = cycle(with_mode(s, "hysteresis", 0.125), now=300.0)
    # within the margin X is the incumbent: the reorder does not count, so X completes on the
    # idle A1/1 as rank 1 would (D3.b) and its held time rides with the attempt (R4)
    assert [(x.reason, x.charge_now) for x in r.releases] == [("dispatched", 0.0)]
    assert {d.job_id: (d.node, d.gpus) for d in r.dispatches} == {"X": (A1, (0, 1))}
    # Z may not reserve A1/1 meanwhile: with X's GPU kept there A1 could never fit Z
    assert r.starts == [] and r.grows == []
    r = cycle(with_mode(s, "hysteresis", 0.12), now=300.0)
    assert [(x.reason, x.charge_now) for x in r.releases] == [("demoted", 24_780.0)]


def test_R6_damped_needs_both_conditions():
    # Z can use X's GPUs (useful says demote) but the usages are within a 20 % margin
    r = cycle(with_mode(worked_example(), "damped", 0.2), now=300.0)
    assert [x.reason for x in r.releases] == ["dispatched"]  # kept by the margin: completes
    # beyond the margin, but Z only admits rtx3080ti (useful says keep)
    q = [
        job("X", "BCG", n=2, at=-100.0, res=RES_X),
        job("Z", "KDG", n=2, at=-50.0, tiers=["rtx3080ti"]),
    ]
    s = snap(default_cluster(states((A1, 1))), q, USAGE)
    r = cycle(with_mode(s, "damped", 0.05), now=300.0)
    assert [x.reason for x in r.releases] == ["dispatched"]  # parked, grown on A1/1, complete


@pytest.mark.parametrize("mode", ["hysteresis", "damped"])
def test_R6_D5_a_reservation_kept_by_the_margin_never_deadlocks_rank1(mode):
    # Found by the simulator's property test: X kept within the margin on A1/0, A1/1 idle, Z
    # (rank 1) needs A1 whole. Z may not reserve the GPU X keeps; had X waited for Z (D5 read
    # as "Z could use it were it released"), neither would move in any later cycle, since decay
    # keeps the two labs' usage ratio. X completes now; Z gets A1 when X ends.
    s = worked_example()
    for now in (300.0, 3_600.0, 86_400.0):  # any later cycle: the same usage ratio
        r = cycle(with_mode(s, mode, 0.2), now=now)
        assert [d.job_id for d in r.dispatches] == ["X"], now


def test_R6_rank1_always_keeps_and_only_other_reasons_release():
    # R5 capacity loss still releases a parked reservation, whatever the mode
    q = [job("X", "BCG", n=2, at=-100.0, res=RES_X), job("Z", "KDG", n=2, at=-50.0)]
    st = states() | {(A1, 1): "down"}
    for mode in DEMOTION_MODES:
        r = cycle(with_mode(snap(default_cluster(st), q, USAGE), mode), now=300.0)
        assert [x.reason for x in r.releases] == ["capacity"], mode


def test_R6_config_validates_the_mode_and_margin():
    assert load_config(env={"JPU_RESERVATION_DEMOTION": "useful"}).reservation_demotion == "useful"
    assert load_config(env={"JPU_RESERVATION_DEMOTION": "yield"}).reservation_demotion == "yield"
    with pytest.raises(ConfigError, match="reservation_demotion"):
        load_config(env={"JPU_RESERVATION_DEMOTION": "sometimes"})
    with pytest.raises(ConfigError, match="reservation_demotion_margin"):
        load_config(env={"JPU_RESERVATION_DEMOTION_MARGIN": "1.0"})


def test_R6_D5_useful_a_parked_job_that_fits_only_at_home_yields_it_to_the_higher_job():
    """Found by the R6 property test: j0 (lab A) kept a 1-GPU reservation on n2 (3 GPUs) under
    `useful` (at the cycle's start j4 could start on n4); rank 1 then took n4, so j4 (3 GPUs)
    could start only on n2 with j0's GPU. j0 "swapped" onto n2's two idle GPUs — a dispatch
    ahead of j4 on the GPUs j4 needed (D5). A swap now goes elsewhere; with nowhere else, the
    walk demotes j0 (R3: charged now). The check at the cycle's start now runs the higher jobs
    in rank order (j3 takes n4's GPUs first, j4 is left with n2 and j0's GPU): j0 is demoted
    there, and the walk then dispatches as `strict` does (j3 best-fits n2, j4 takes n4)."""
    t0 = tier("t0", 12, 10.0, 0, max_gpus=3)
    layout = {"n0": 2, "n1": 1, "n2": 3, "n3": 1, "n4": 4}
    held = {("n0", 0): "reserved:j1", ("n2", 0): "reserved:j0"}
    gpus = [Gpu(n, "t0", i, held.get((n, i), "free")) for n, c in layout.items() for i in range(c)]

    def q(j: str, lab: str, n: int, res: Reservation | None = None) -> QueuedJob:
        return QueuedJob(
            job_id=j, lab=lab, user="u", num_gpus=n, queue_entered_at=0.0, reservation=res
        )

    queue = [
        q("j0", "A", 2, Reservation(node="n2", tier="t0", gpus=(0,), since=0.0)),
        q("j1", "A", 3, Reservation(node="n0", tier="t0", gpus=(0,), since=0.0)),  # R5: n0 < 3
        q("j2", "A", 2), q("j3", "B", 3), q("j4", "B", 3), q("j5", "A", 1),
        q("j6", "A", 2), q("j7", "A", 2), q("j8", "B", 2),
    ]  # fmt: skip
    s = Snapshot(
        tiers={"t0": t0}, gpus=gpus, queue=queue, usage={"A": LabUsage(100.0, 0.0)},
        half_life_s=3600.0, reservation_demotion="useful",
    )  # fmt: skip
    r = cycle(s, now=1000.0)
    assert r.order[:5] == ["j3", "j4", "j8", "j0", "j1"]
    assert {(x.job_id, x.reason) for x in r.releases} == {("j1", "capacity"), ("j0", "demoted")}
    demoted = next(x for x in r.releases if x.job_id == "j0")
    assert demoted.charge_now == 1 * 1000.0 * 10.0  # R3: the held time, charged at once
    got = {d.job_id: (d.node, d.gpus) for d in r.dispatches}
    assert got["j4"] == ("n4", (0, 1, 2)) and got["j3"] == ("n2", (0, 1, 2)) and "j0" not in got
    strict = cycle(msgspec.structs.replace(s, reservation_demotion="strict"), now=1000.0)
    assert r.dispatches == strict.dispatches and r.releases == strict.releases


# --- R6 yield: a 4-GPU reservation on an 8-GPU node; the other 4 GPUs run jobs ---------------

T8 = tier("t8", 24, 82.6, 20, max_gpus=8)
N8 = "n8"


def yield_case(*above: QueuedJob, idle: int = 0, other_free: bool = False) -> Snapshot:
    """X (lab BCG, 8 GPUs) reserves GPUs 0-3 of n8 (0-1 since t=0, 2-3 since t=100); GPUs 4-7
    run jobs, `idle` of them are free; `above` (lab KDG, less usage) rank above X. `other_free`:
    a second 1-GPU node m1 is free."""
    res = Reservation(node=N8, tier="t8", gpus=(0, 1, 2, 3), since=0.0,
                      joined=(0.0, 0.0, 100.0, 100.0))  # fmt: skip
    states = {i: "reserved:X" for i in range(4)} | {
        i: "free" if i < 4 + idle else f"job:r{i}" for i in range(4, 8)
    }
    gpus = [Gpu(N8, "t8", i, states[i]) for i in range(8)]
    gpus.append(Gpu("m1", "t8", 0, "free" if other_free else "job:m"))
    q = [job("X", "BCG", n=8, at=-100.0, res=res), *above]
    return Snapshot(tiers={"t8": T8}, gpus=gpus, queue=q, usage=USAGE,
                    reservation_demotion="yield")  # fmt: skip


def test_R6_yield_a_higher_1gpu_job_takes_exactly_one_gpu_and_the_rest_stays():
    s = yield_case(job("z", "KDG", n=1, at=-50.0))
    strict = cycle(with_mode(s, "strict"), now=300.0)
    [rel] = strict.releases  # strict: the whole reservation goes, 4 GPUs' held time charged now
    assert (rel.reason, rel.charge_now) == ("demoted", (300.0 * 2 + 200.0 * 2) * 82.6)
    r = cycle(s, now=300.0)
    assert r.releases == []  # nothing released, nothing charged now (F4)
    [sh] = r.shrinks  # the GPU that joined last leaves; its 200 s ride with the attempt
    assert (sh.job_id, sh.reason, sh.removed, sh.gpus) == ("X", "yielded", (3,), (0, 1, 2))
    assert (sh.gpu_seconds, sh.tflops) == (200.0, 82.6)
    assert {d.job_id: (d.node, d.gpus) for d in r.dispatches} == {"z": (N8, (3,))}  # D5
    assert r.pending == {"X": "Reservation"}  # D7: parked with the rest


def test_R6_yield_the_log_says_yielded_and_the_fold_charges_it_with_the_attempt():
    from jpu.domain.dispatch import cycle_events
    from jpu.events import JobDispatched, ReservationShrunk

    r = cycle(yield_case(job("z", "KDG", n=1, at=-50.0)), now=300.0)
    events = cycle_events(r, {"t8": T8}, 300.0)
    assert [type(e) for e in events] == [ReservationShrunk, JobDispatched]  # GPU freed first
    sh = events[0]
    assert isinstance(sh, ReservationShrunk)
    assert (sh.reason, sh.removed, sh.gpus, sh.schema_version) == ("yielded", [3], [0, 1, 2], 3)


def test_R6_yield_gives_back_only_what_the_higher_jobs_need():
    # two 1-GPU jobs above, no idle GPU: both come from X, which keeps two
    two = (job("z1", "KDG", n=1, at=-50.0), job("z2", "KDG", n=1, at=-40.0))
    r = cycle(yield_case(*two), now=300.0)
    assert sorted(d.job_id for d in r.dispatches) == ["z1", "z2"]
    assert [(sh.removed, sh.gpus) for sh in r.shrinks] == [((2, 3), (0, 1))]
    # a 3-GPU job above with one idle GPU on n8: two come from X (the idle GPU goes first)
    r = cycle(yield_case(job("w", "KDG", n=3, at=-50.0), idle=1), now=300.0)
    assert [(sh.removed, sh.gpus) for sh in r.shrinks] == [((2, 3), (0, 1))]
    assert {d.job_id: d.gpus for d in r.dispatches} == {"w": (2, 3, 4)}
    # two 1-GPU jobs and one idle GPU: z1 takes the idle GPU first, so z2 needs one of X's
    # (D5: the count runs the higher jobs in rank order; per class on the pool as it is, both
    # once saw the same idle GPU, X kept all four and z2 waited a cycle on a GPU X held)
    r = cycle(yield_case(*two, idle=1), now=300.0)
    assert [(sh.removed, sh.gpus) for sh in r.shrinks] == [((3,), (0, 1, 2))]
    assert {d.job_id: d.gpus for d in r.dispatches} == {"z1": (3,), "z2": (4,)}


def test_R6_yield_demotes_when_the_higher_job_needs_every_reserved_gpu():
    # a 4-GPU job above needs all four: nothing would be left, so it is R3, charged at once
    r = cycle(yield_case(job("w", "KDG", n=4, at=-50.0)), now=300.0)
    [rel] = r.releases
    assert (rel.job_id, rel.reason, rel.charge_now) == ("X", "demoted", 1000.0 * 82.6)
    assert r.shrinks == [] and {d.job_id: d.gpus for d in r.dispatches} == {"w": (0, 1, 2, 3)}


def test_R6_yield_keeps_everything_when_the_higher_job_can_start_elsewhere_or_not_at_all():
    # z fits on the free m1: nothing is given back (as `useful`)
    r = cycle(yield_case(job("z", "KDG", n=1, at=-50.0), other_free=True), now=300.0)
    assert r.releases == [] and r.shrinks == []
    assert {d.job_id: (d.node, d.gpus) for d in r.dispatches} == {"z": ("m1", (0,))}
    # a 9-GPU job can never fit n8 (D2): nothing to yield to it
    r = cycle(yield_case(job("w", "KDG", n=9, at=-50.0)), now=300.0)
    assert r.releases == [] and r.shrinks == [] and r.dispatches == []


def test_R6_yield_rank1_never_yields():
    # X is rank 1 (its lab now has the least usage): the 1-GPU job below it waits (D5)
    s = yield_case(job("z", "KDG", n=1, at=-50.0))
    s = msgspec.structs.replace(s, usage={"BCG": LabUsage(1.0, 300.0), "KDG": USAGE["KDG"]})
    r = cycle(s, now=300.0)
    assert r.releases == [] and r.shrinks == [] and r.dispatches == []
    assert r.pending == {"X": "Reservation", "z": "Priority"}


@pytest.mark.parametrize("mode", DEMOTION_MODES)
def test_R6_D5_rank1_chooses_again_when_a_parked_swap_frees_gpus(mode):
    """Rank 1 R (1 GPU, tier a only) finds nothing idle: P's only free GPU is X's reservation.
    X (2 GPUs), kept within the margin (hysteresis, damped), swaps to Q in the walk and gives
    P/0 back. R, not L (rank 3, same request), starts there (D5): the walk used to revive the
    classes only from rank 2 on. The other modes demote X first; R starts on P/0 either way."""
    ta, tb = tier("a", 24, 82.6, 20), tier("b", 24, 34.1, 10)
    gpus = [Gpu("P", "a", 0, "reserved:X"), Gpu("P", "a", 1, "job:r"),
            Gpu("Q", "b", 0, "free"), Gpu("Q", "b", 1, "free")]  # fmt: skip
    x = job("X", "B", n=2, res=Reservation(node="P", tier="a", gpus=(0,), since=0.0))
    q = [job("R", "K", tiers=["a"]), x, job("L", "Z", at=1.0, tiers=["a"])]
    usage = {"K": LabUsage(950.0, 1000.0), "B": LabUsage(1000.0, 1000.0), "Z": LabUsage(5e3, 0.0)}
    s = snap(gpus, q, usage, tier_map={"a": ta, "b": tb}, half_life_s=3600.0)
    r = cycle(with_mode(s, mode), now=1000.0)
    assert r.order == ["R", "X", "L"]
    got = {d.job_id: (d.node, d.gpus) for d in r.dispatches}
    assert got == {"R": ("P", (0,)), "X": ("Q", (0, 1))}
    assert list(r.pending) == ["L"]  # D7: Priority, or Resources where P/0 was parked at start


@pytest.mark.parametrize("mode", DEMOTION_MODES)
def test_R6_D5_a_reserving_rank1_keeps_what_a_parked_swap_frees_for_the_next_cycle(mode):
    """Rank 1 R (2 GPUs, tier a) reserves S/0 and has nowhere to go. X (3 GPUs), kept within
    the margin, holds P/0-1 and swaps to Q in the walk: P is then whole for R. L (rank 3, the
    same request) must not take it (D5). R has decided this cycle, so P stays idle until the
    next one, where R swaps to it. The other modes demote X first and R swaps to P at once."""
    ta = tier("a", 24, 82.6, 20, max_gpus=3)
    tb = tier("b", 24, 34.1, 10, max_gpus=3)
    gpus = [Gpu("S", "a", 0, "reserved:R"), Gpu("S", "a", 1, "job:r"),
            Gpu("P", "a", 0, "reserved:X"), Gpu("P", "a", 1, "reserved:X"),
            Gpu("P", "a", 2, "job:p"), *(Gpu("Q", "b", i, "free") for i in range(3))]  # fmt: skip
    q = [
        job("R", "K", n=2, tiers=["a"], res=Reservation(node="S", tier="a", gpus=(0,), since=0.0)),
        job("X", "B", n=3, res=Reservation(node="P", tier="a", gpus=(0, 1), since=0.0)),
        job("L", "Z", n=2, at=1.0, tiers=["a"]),
    ]
    usage = {"K": LabUsage(950.0, 1000.0), "B": LabUsage(1000.0, 1000.0), "Z": LabUsage(5e3, 0.0)}
    s = snap(gpus, q, usage, tier_map={"a": ta, "b": tb}, half_life_s=3600.0)
    r = cycle(with_mode(s, mode), now=1000.0)
    assert r.order == ["R", "X", "L"]
    got = {d.job_id: (d.node, d.gpus) for d in r.dispatches}
    assert got["X"] == ("Q", (0, 1, 2)) and "L" not in got
    if mode in ("hysteresis", "damped"):
        assert "R" not in got  # decided this cycle: P/0-1 wait for it, idle
        assert [(x.job_id, x.reason) for x in r.releases] == [("X", "swap")]
    else:
        assert got["R"] == ("P", (0, 1))  # X demoted first, R swaps (R4)


def test_D5_two_higher_jobs_competing_for_the_same_idle_gpus_demote_the_parked_one():
    """Found by the R6 property test: n0/t1 has 4 GPUs, h0 (lab C, 2 GPUs, rank 4) reserves
    GPU 0, GPUs 1-3 are free; j0 and j1 (lab A, 2 t1 GPUs each) and j2 (1 t1 GPU) rank above
    it; t0 (n1, n2) is free. Per class on the pool as it is, j0's class "could start" on the 3
    idle GPUs, so `useful`, `damped` and `yield` kept h0's GPU: j0 took 2, j1 waited, j2 took
    the third, and h0 then went to t0 (a swap) and gave GPU 0 back too late — j2 had jumped
    ahead of j1 for GPUs j1 could use (D5). Run in rank order, j1 is left waiting and could
    start with h0's GPU: h0 is demoted at the cycle's start in every mode, as R3 does."""
    t0 = tier("t0", 24, 82.6, 1, max_gpus=8)
    t1 = tier("t1", 12, 34.1, 0, max_gpus=4)
    gpus = [Gpu("n0", "t1", 0, "reserved:h0")] + [Gpu("n0", "t1", i, "free") for i in (1, 2, 3)]
    gpus += [Gpu(n, "t0", i, "free") for n, c in (("n1", 4), ("n2", 8)) for i in range(c)]
    only_t1 = frozenset({"t1"})

    def q(j: str, lab: str, n: int, **kw: object) -> QueuedJob:
        return QueuedJob(job_id=j, lab=lab, user="u", num_gpus=n, queue_entered_at=0.0, **kw)  # type: ignore[arg-type]

    queue = [
        q("h0", "C", 2, reservation=Reservation("n0", "t1", (0,), 0.0, (0.0,))),
        q("j0", "A", 2, tiers=only_t1), q("j1", "A", 2, tiers=only_t1),
        q("j2", "A", 1, tiers=only_t1),
    ]  # fmt: skip
    usage = {"A": LabUsage(0.0, 0.0), "C": LabUsage(250.0, 0.0)}
    base = Snapshot(tiers={"t0": t0, "t1": t1}, gpus=gpus, queue=queue, usage=usage,
                    half_life_s=3600.0)  # fmt: skip
    strict = cycle(base, now=1000.0)
    assert strict == ref_cycle(base, 1000.0)  # the literal oracle
    for mode in DEMOTION_MODES:
        r = cycle(msgspec.structs.replace(base, reservation_demotion=mode), now=1000.0)
        assert r.order == ["j0", "j1", "j2", "h0"]
        assert [(x.job_id, x.reason) for x in r.releases] == [("h0", "demoted")], mode
        got = {d.job_id: (d.node, d.tier, d.gpus) for d in r.dispatches}
        assert got == {"j0": ("n0", "t1", (0, 1)), "j1": ("n0", "t1", (2, 3)),
                       "h0": ("n1", "t0", (0, 1))}, mode  # fmt: skip
        assert r.pending == {"j2": "Priority"}, mode


def test_R6_yield_two_parked_reservations_that_together_block_rank1_both_give_way():
    """Found by the simulator's R6 property test: on an 8-GPU node with 3 idle GPUs, j1 (lab B)
    parks 3 and j5 (lab C) parks 2; rank 1, j0 (lab A, 8 GPUs), fits only there. Counted one
    reservation at a time neither was needed (3 + 3 and 3 + 2 < 8), both kept, rank 1 could
    neither start nor reserve, and nothing ever ran on the node again. Counting the parked GPUs
    of the jobs below, both give theirs back (all of them: R3) and rank 1 starts at once."""
    states = {0: "free", 1: "free", 2: "free"} | {i: "reserved:j1" for i in (3, 4, 5)}
    states |= {6: "reserved:j5", 7: "reserved:j5"}
    gpus = [Gpu(N8, "t8", i, states[i]) for i in range(8)]
    q = [
        job("j0", "A", n=8, at=-10.0),
        job("j1", "B", n=6, at=-20.0, res=reserved(N8, "t8", (3, 4, 5), since=-5.0)),
        job("j5", "C", n=6, at=-30.0, res=reserved(N8, "t8", (6, 7), since=-5.0)),
    ]
    usage = {"A": LabUsage(9.0, 0.0), "B": LabUsage(12.0, 0.0), "C": LabUsage(14.0, 0.0)}
    s = Snapshot(tiers={"t8": T8}, gpus=gpus, queue=q, usage=usage, reservation_demotion="yield")
    r = cycle(s, now=0.0)
    assert r.order == ["j0", "j1", "j5"]
    assert sorted((x.job_id, x.reason) for x in r.releases) == [
        ("j1", "demoted"),
        ("j5", "demoted"),
    ]
    assert {d.job_id: (d.node, d.gpus) for d in r.dispatches} == {"j0": (N8, tuple(range(8)))}
