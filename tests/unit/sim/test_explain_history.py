"""Explanations from the log (SPEC U4): the pure modules of jpu.explain on
logs the simulator wrote with the services' own policy — SPEC R3's worked example above all."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from jpu.bus import Delivered
from jpu.config import load_config
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.codec import pack, unpack
from jpu.events import UsageCharged
from jpu.explain.queue_at import fold_until, queue_at
from jpu.explain.usage import explain_usage, ledger, usage_statement
from jpu.explain.wait import JobNotInLog, wait_timeline
from jpu.policy.fairshare import decayed
from jpu.policy.model import LabUsage
from jpu.testing.simkit import HALF_LIFE, ONE_4090_NODE, Simulate, job, r3_example


def test_U4_R3_why_names_the_charge_that_demoted_X(simulate: Simulate) -> None:
    _, config, log = r3_example(simulate)
    t = wait_timeline(log, "x", config)
    (res,) = t.reservations
    assert (res.reason, res.charged_now, res.gpu_seconds, res.gpus) == ("demoted", True, 300.0, [1])
    assert res.cost == pytest.approx(24_780.0, abs=1e-9)  # 1 × 300 × 82.6, to the TFLOP-s
    # the event after which X was no longer rank 1: Y's end, charging BCG (X's own lab) ...
    y_end = next(d for d in log if type(d.event).__name__ == "JobEnded" and d.event.job_id == "y")
    cause = res.demoted_by
    assert cause is not None
    assert (cause.event, cause.job_id, cause.lab, cause.seq) == ("JobEnded", "y", "BCG", y_end.seq)
    assert cause.charge == pytest.approx(y_end.event.usage)
    # ... which lifted BCG above KDG, whose Z then ranked first
    assert (res.overtaken_by, res.overtaken_by_lab) == ("z", "KDG")
    assert res.overtaken_by_usage == pytest.approx(decayed(LabUsage(28_000, 0), 301, HALF_LIFE))
    assert cause.lab_usage is not None and cause.lab_usage > res.overtaken_by_usage
    # rank and reason over the wait (D1, D7)
    seen = [(s.state, s.rank, s.pending_reason) for s in t.steps]
    assert seen[:4] == [
        ("PERSONAL_QUEUE_WAIT", None, None),  # promoted at once: alice had a free slot (S1)
        ("GLOBAL_QUEUE_WAIT", 1, "Reservation"),
        ("RESERVING", 1, "Reservation"),
        ("RESERVING", 2, "Priority"),  # Y's end: Z ahead, X about to be demoted (R3)
    ]
    demoted_step = t.steps[3]
    assert [(a.lab, a.jobs) for a in demoted_step.ahead] == [("KDG", 1)]
    assert ("GLOBAL_QUEUE_WAIT", 1, "Resources") in seen  # Z dispatched; X first, no GPUs
    assert seen[-1] == ("COMPLETED", None, None)
    # phases of a finished job: entered at 1, reserved 1→301, waited 301→801, ran 801→1801
    assert t.phases == {"personal_queue": 0.0, "global_queue": 500.0, "reserving": 300.0,
                        "starting": 0.0, "running": 1000.0}  # fmt: skip
    assert t.terminal and t.final and t.state == "COMPLETED"


def test_U4_wait_is_deterministic_and_the_same_from_a_snapshot(simulate: Simulate) -> None:
    """An auditor gets the same answer from the same log, from seq 1 or from a snapshot of the
    fold taken before the job's submission (the snapshots, SPEC O6)."""
    _, config, log = r3_example(simulate)
    whole = wait_timeline(log, "x", config)
    assert msgspec.json.encode(wait_timeline(log, "x", config)) == msgspec.json.encode(whole)
    submit = next(d.seq for d in log if getattr(d.event, "job_id", None) == "x")
    state = ClusterState.new(config, keep_ended=False)
    for d in log[: submit - 1]:
        evolve(state, d)
    _, restored = unpack(pack(state, "sim", 0.0), config)
    tail = wait_timeline(log[submit - 1 :], "x", config, state=restored)
    assert msgspec.json.encode(tail) == msgspec.json.encode(whole)


def test_U4_wait_of_a_queued_job_runs_to_now_and_an_unknown_job_is_refused(
    simulate: Simulate,
) -> None:
    _, config, log = r3_example(simulate)
    upto = [d for d in log if d.event.ts <= 400]  # X waits in the global queue at 400
    t = wait_timeline(upto, "x", config, now=450.0)
    assert not t.terminal and not t.final and t.state == "GLOBAL_QUEUE_WAIT" and t.as_of == 450.0
    assert t.phases["global_queue"] == pytest.approx(149.0)
    assert t.steps[-1].rank == 1 and t.steps[-1].pending_reason == "Resources"
    with pytest.raises(JobNotInLog):
        wait_timeline(log, "nope", config)


def test_F5_explain_usage_lists_Ys_run_Xs_24780_reservation_and_Xs_run(
    simulate: Simulate,
) -> None:
    run, _, log = r3_example(simulate)
    book = ledger(log)
    at = 5_000.0
    x = explain_usage(book, "BCG", at, HALF_LIFE)
    rows = [(c.kind, c.reason, c.job_id, c.user, c.attempt) for c in x.charges]
    assert rows == [
        ("initial", "initial", None, None, None),
        ("run", "job_end", "y", "bob", 1),
        ("reservation", "demoted", "x", "alice", 1),  # R3: charged at release
        ("run", "job_end", "x", "alice", 1),
    ]
    _, y_run, x_res, x_run = x.charges
    assert x_res.amount == pytest.approx(24_780.0, abs=1e-9)
    assert [(h.what, h.tier, h.gpu_seconds, h.tflops) for h in x_res.held] == [
        ("reservation", "rtx4090", 300.0, 82.6)
    ]
    assert [(h.what, h.gpu_seconds) for h in y_run.held] == [("run", 301.0)]
    assert [(h.what, h.gpu_seconds) for h in x_run.held] == [("run", 2000.0)]  # 2 GPUs × 1000 s
    assert x_run.amount == pytest.approx(2 * 1000 * 82.6)  # the reservation was paid at R3
    for c in x.charges:  # F3: decay since each charge, from the one rule
        assert c.value_now == decayed(LabUsage(c.amount, c.at), at, HALF_LIFE)
        assert c.decay == pytest.approx(0.5 ** ((at - c.at) / HALF_LIFE))
    # the sums reproduce the lab's usage (GET /v1/labs/{lab}: the last stored value, decayed)
    last = [e for e in run.events if isinstance(e, UsageCharged) and e.lab == "BCG"][-1]
    assert x.raw_value == last.value_after and x.as_of == last.as_of
    assert x.usage == decayed(LabUsage(last.value_after, last.as_of), at, HALF_LIFE)
    assert x.total_value == pytest.approx(x.usage, rel=1e-9, abs=1e-6)
    assert x.listed_value == x.total_value
    # a period lists only its charges; the whole lab's usage is still given
    part = explain_usage(book, "BCG", at, HALF_LIFE, since=301.0, until=1000.0)
    assert [c.reason for c in part.charges] == ["job_end", "demoted"]
    assert part.total_value == x.total_value
    assert explain_usage(book, "NONE", at, HALF_LIFE).usage == 0.0  # F6


def test_F5_usage_statement_by_lab_and_tier(simulate: Simulate) -> None:
    _, _, log = r3_example(simulate)
    s = usage_statement(ledger(log))
    bcg, kdg = s.labs
    assert (bcg.lab, kdg.lab) == ("BCG", "KDG")
    assert bcg.initial_tflop_s == 24_000 and kdg.initial_tflop_s == 28_000
    assert bcg.tflop_s == pytest.approx((301 + 300 + 2000) * 82.6)
    assert bcg.gpu_hours == {"rtx4090": pytest.approx((301 + 300 + 2000) / 3600)}
    assert bcg.reserved_gpu_hours == pytest.approx(300 / 3600)
    assert (bcg.jobs, bcg.attempts, kdg.jobs) == (2, 2, 1)
    assert kdg.tflop_s == pytest.approx(2 * 500 * 82.6)
    assert bcg.share + kdg.share == pytest.approx(1.0)
    assert bcg.share == pytest.approx(2601 / (2601 + 1000))
    early = usage_statement(ledger(log), until=400.0)  # Y's run and X's R3 charge only
    assert early.labs[0].tflop_s == pytest.approx(601 * 82.6) and early.labs[1].tflop_s == 0


def test_D1_D7_queue_at_a_past_moment(simulate: Simulate) -> None:
    _, config, log = r3_example(simulate)
    q = queue_at(fold_until(log, 100.0, config), 100.0, config)
    assert [(e.rank, e.job_id, e.state, e.pending_reason) for e in q.queue] == [
        (1, "x", "RESERVING", "Reservation"),
        (2, "z", "GLOBAL_QUEUE_WAIT", "Resources"),
    ]
    held = q.queue[0].reservation
    assert held is not None and (held.node, held.gpus, held.since) == ("n1", [1], 1.0)
    assert [(e.job_id, e.state) for e in q.running] == [("y", "RUNNING")]
    assert q.queue[0].lab_usage == pytest.approx(decayed(LabUsage(24_000, 0), 100, HALF_LIFE))
    later = queue_at(fold_until(log, 500.0, config), 500.0, config)
    assert [(e.rank, e.job_id, e.pending_reason) for e in later.queue] == [(1, "x", "Resources")]
    assert [e.job_id for e in later.running] == ["z"]


def test_X8_wait_of_an_oom_retry_spans_both_attempts(simulate: Simulate) -> None:
    """An attempt that ran out of GPU memory is not the end (X8): the wait goes on through the
    retry on a bigger tier; the time between the OOM and the decision is its own phase."""
    busy = [job(f"b{i}", "OTH", f"o{i}", 0, 1, 500) for i in range(4)]  # both 4090 nodes
    oom = {**job("m", "BCG", "alice", 1, 1, 100), "peak_vram_gb": 20}  # > 12 GB of a 3080 Ti
    run = simulate([*busy, oom], labs=[{"name": "OTH", "usage": 1e9}])
    config = load_config(Path(run.out).parent / "cluster.yaml", env={})
    log = [Delivered(i + 1, "sim", e, {}) for i, e in enumerate(run.events)]
    ends = [d for d in log if type(d.event).__name__ == "JobEnded" and d.event.job_id == "m"]
    assert [e.event.oom for e in ends] == [True, False]  # the sim ran it twice
    first = wait_timeline(log[: ends[0].seq], "m", config)
    assert first.terminal and not first.final  # FAILED, retry not decided yet
    whole = wait_timeline(log, "m", config)
    assert whole.final and whole.state == "COMPLETED" and whole.attempt == 2
    assert whole.phases["running"] == pytest.approx(60.0 + 100.0)  # oom_after_s, then the run
    states = [s.state for s in whole.steps]
    assert states.count("RUNNING") == 2 and "FAILED" in states


def test_U4_a_long_wait_far_back_is_sampled_and_its_cost_bounded(simulate: Simulate) -> None:
    """A heavy lab's job waits behind a light lab's stream of jobs (a long queue for hours): far
    back it is sampled — a fraction of the cycles — and every step it shows is still its true
    standing at that moment; phases, reservations and the end are exactly the exact fold's."""
    from jpu.explain.wait import NEAR, WaitFold

    labs = [{"name": "HVY", "usage": 10**9}, {"name": "LGT", "usage": 0}]
    jobs = [job("h1", "HVY", "hana", 600, 1, 60)]
    jobs += [job(f"l{i}", "LGT", f"lee{i % 100}", 1 + 20 * i, 1, 60) for i in range(400)]
    run = simulate(jobs, labs=labs, nodes=ONE_4090_NODE, half_life_s=HALF_LIFE)
    config = load_config(Path(run.out).parent / "cluster.yaml", env={})
    log = [Delivered(i + 1, "sim", e, {}) for i, e in enumerate(run.events)]
    folds = {}
    for samples in (None, 64):
        fold = WaitFold("h1", config, half_life_s=HALF_LIFE, samples=samples)
        for d in log:
            fold.apply(d)
        folds[samples] = fold
    exact, coarse = folds[None].result(), folds[64].result()
    assert exact.state == coarse.state == "COMPLETED"
    assert max(s.rank or 0 for s in exact.steps) > 50  # far back for a long time
    assert folds[64].cycles * 3 < folds[None].cycles  # the cost
    assert any(s.sampled and s.cause is None for s in coarse.steps)
    assert not any(s.sampled for s in exact.steps)
    assert coarse.phases == exact.phases and coarse.reservations == exact.reservations
    for s in coarse.steps:  # each shown step is its true standing then (the exact fold's)
        then = [x for x in exact.steps if x.seq <= s.seq][-1]
        assert (s.state, s.rank, s.pending_reason, s.first) == (
            then.state,
            then.rank,
            then.pending_reason,
            then.first,
        ), s.seq
    # near the head (from the first step it is seen there) every step is there, with its cause
    c0 = next(s for s in coarse.steps if s.rank is not None and s.rank <= NEAR)
    after = [s for s in exact.steps if s.seq > c0.seq]
    assert after and [s for s in coarse.steps if s.seq > c0.seq] == after
