"""Simulator basics on the default cluster (SPEC §10, F1, F4, Q2, Q5, S)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jpu.sim.audit import audit_dir
from jpu.sim.workload import WorkloadError, load_workload
from jpu.testing.simkit import Simulate


def job(id: str, lab: str = "L1", user: str = "u1", **kw: object) -> dict[str, object]:
    return {"id": id, "lab": lab, "user": user, "submit_s": 0, "num_gpus": 1,
            "duration_s": 3600, **kw}  # fmt: skip


def test_F1_one_4090_hour_is_297360_and_waits_0(simulate: Simulate) -> None:
    run = simulate([job("a")])
    assert run.usage("L1") == pytest.approx(297_360, abs=0.5)  # decayed to its own end time
    assert run.job("a") == {**run.job("a"), "state": "COMPLETED", "attempts": 1, "wait_s": 0.0,
                            "jct_s": 3600.0, "tier": "rtx4090"}  # fmt: skip
    ended = run.of("JobEnded", "a")[0]
    assert (ended.gpu_seconds_run, ended.tflops, ended.usage) == (3600.0, 82.6, 297_360.0)
    assert [type(e).__name__ for e in run.events] == [
        "JobSubmitted", "JobPromoted", "JobDispatched", "JobStarted", "JobEnded", "UsageCharged",
    ]  # fmt: skip
    assert run.summary["makespan_s"] == 3600.0 and run.summary["end_time_s"] == 3600.0


def test_F3_usage_in_summary_is_decayed_to_end_time(simulate: Simulate) -> None:
    # charged 297,360 at t=3600, read at the end t=3600+half_life → half of it
    run = simulate([job("a"), job("b", submit_s=3600 + 1000, duration_s=0, lab="L2")],
                   half_life_s=1000)  # fmt: skip
    assert run.usage("L1") == pytest.approx(297_360 / 2)
    assert run.summary["labs"]["L1"]["charged_tflop_s"] == pytest.approx(297_360)


def test_F4_two_gpus_run_on_one_placement_and_charge_at_end(simulate: Simulate) -> None:
    run = simulate([job("w", num_gpus=2, duration_s=1800)])
    d = run.of("JobDispatched", "w")[0]
    assert (d.tier, len(d.gpus)) == ("rtx4090", 2)  # P3: one node, one tier
    charges = run.of("UsageCharged")
    assert [(c.ts, c.amount) for c in charges] == [(1800.0, pytest.approx(2 * 1800 * 82.6))]


def test_Q5_user_slots_from_cluster_file_and_default(simulate: Simulate) -> None:
    labs = [{"name": "L1", "users": [{"name": "u1", "max_active_jobs": 1}]}]
    jobs = [job(f"a{i}", user="u1") for i in range(3)] + [job(f"b{i}", user="u2") for i in range(4)]
    run = simulate(jobs, labs=labs, max_active_jobs=3)
    promoted = {e.job_id: e.ts for e in run.of("JobPromoted")}
    assert [promoted[f"a{i}"] for i in range(3)] == [0.0, 3600.0, 7200.0]  # one slot at a time
    assert [promoted[f"b{i}"] for i in range(4)] == [0.0, 0.0, 0.0, 3600.0]  # default 3
    # Q5: promotion happens the instant a slot frees, at the job's end, before any cycle
    assert run.job("a1")["wait_s"] == 3600.0


def test_Q2_job_no_placement_can_run_is_rejected_without_events(simulate: Simulate) -> None:
    run = simulate([job("wide", num_gpus=4), job("ok")])  # default tiers: max_gpus 2
    assert run.job("wide")["state"] == "REJECTED"
    assert run.job("wide")["reason"] == "NO_FIT_PLACEMENT"
    assert not [e for e in run.events if getattr(e, "job_id", None) == "wide"]
    assert run.job("ok")["state"] == "COMPLETED"


def test_cancel_while_running_charges_held_time(simulate: Simulate) -> None:
    run = simulate([job("c", cancel_s=600)])
    ended = run.of("JobEnded", "c")[0]
    assert (ended.state, ended.ts, ended.gpu_seconds_run) == ("CANCELLED", 600.0, 600.0)
    assert run.usage("L1") == pytest.approx(600 * 82.6)
    assert run.of("JobCancelRequested", "c")[0].ts == 600.0


def test_cancel_in_personal_queue_frees_nothing_and_charges_nothing(simulate: Simulate) -> None:
    labs = [{"name": "L1", "users": [{"name": "u1", "max_active_jobs": 1}]}]
    run = simulate([job("first"), job("second", cancel_s=10)], labs=labs)
    assert run.job("second")["state"] == "CANCELLED"
    assert run.job("second")["wait_s"] is None
    assert not run.of("JobPromoted", "second")
    assert [c.job_id for c in run.of("UsageCharged")] == ["first"]


def test_initial_lab_usage_is_logged_and_decays(simulate: Simulate) -> None:
    run = simulate([job("a", lab="L2")], labs=[{"name": "L1", "usage": 1000.0}],
                   half_life_s=3600)  # fmt: skip
    first = run.events[0]
    assert type(first).__name__ == "UsageCharged" and first.reason == "initial"
    assert run.usage("L1") == pytest.approx(500.0)


def test_SIM_log_decodes_and_replays_to_summary_usage(simulate: Simulate) -> None:
    """SPEC F5, §10: replaying the log through the charging code gives the summary's usage."""
    jobs = [job(f"j{i}", lab=f"L{i % 3}", user=f"u{i % 5}", submit_s=i * 100.0,
                num_gpus=1 + i % 2, duration_s=500 + 37 * i) for i in range(40)]  # fmt: skip
    run = simulate(jobs, labs=[{"name": "L0", "usage": 5e5}], half_life_s=2000, backfill=True)
    report = audit_dir(run.out)
    assert report.ok, report.problems
    assert set(report.labs) == {"L0", "L1", "L2"}
    assert all(v["rel_diff"] < 1e-9 for v in report.labs.values())


def test_SIM_two_runs_write_identical_files(simulate: Simulate) -> None:
    jobs = [job(f"j{i}", lab=f"L{i % 2}", submit_s=i * 7.0, num_gpus=1 + i % 2,
                duration_s=100 + 13 * i, **({"cancel_s": 50} if i % 5 == 0 else {}))
            for i in range(30)]  # fmt: skip
    a = simulate(jobs, backfill=True)
    b = simulate(jobs, backfill=True)
    assert (a.out / "events.jsonl").read_bytes() == (b.out / "events.jsonl").read_bytes()
    sa, sb = (json.loads((r.out / "summary.json").read_text()) for r in (a, b))
    assert sa.pop("inputs") != sb.pop("inputs")  # only the input paths differ
    assert sa == sb


def test_workload_bad_line_error_names_the_line(tmp_path: Path) -> None:
    p = tmp_path / "w.jsonl"
    p.write_text(
        '{"id": "a", "lab": "L", "user": "u", "submit_s": 0, "num_gpus": 1, "duration_s": 5}\n'
        "\n"
        '{"id": "b", "lab": "L", "user": "u", "submit_s": 0, "num_gpus": "two", "duration_s": 5}\n'
    )
    with pytest.raises(WorkloadError, match=r"w.jsonl:3: .*num_gpus"):
        load_workload(p)
    p.write_text('{"id": "a", "lab": "L", "user": "u", "submit_s": 0, "num_gpus": 9, '
                 '"duration_s": 5}\n')  # fmt: skip
    with pytest.raises(WorkloadError, match=r":1: num_gpus must be 1..8"):
        load_workload(p)
    p.write_text('{"id": "a", "lab": "L", "user": "u", "submit_s": 0, "num_gpus": 1}\n')
    with pytest.raises(WorkloadError, match=r":1: .*duration_s"):
        load_workload(p)


def test_D8_event_cycles_coalesced_and_D3_periodic_only(simulate: Simulate) -> None:
    jobs = [job("a", submit_s=1.3, duration_s=10.7), job("b", submit_s=1.3, duration_s=5)]
    one_gpu = [{"name": "n1", "gpus": {"rtx4090": 1}}]
    # D8: an arrival on an idle cluster starts at once; the freed GPU is reused at once
    run = simulate(jobs, nodes=one_gpu, cycle_s=5)
    assert [(e.job_id, e.ts) for e in run.of("JobDispatched")] == [("a", 1.3), ("b", 12.0)]
    # periodic cycles only (inf gap): dispatches wait for the next 5 s tick
    run = simulate(jobs, nodes=one_gpu, cycle_s=5, min_cycle_gap_s=float("inf"))
    assert [(e.job_id, e.ts) for e in run.of("JobDispatched")] == [("a", 5.0), ("b", 20.0)]
    assert run.job("b")["wait_s"] == 20.0 - 1.3


def test_time_limit_shorter_than_the_work_ends_FAILED_TIMEOUT(simulate: Simulate) -> None:
    run = simulate([job("t", time_limit_s=600), job("ok", time_limit_s=7200)])
    ended = run.of("JobEnded", "t")[0]
    assert (ended.state, ended.reason, ended.ts, ended.oom) == ("FAILED", "TIMEOUT", 600.0, False)
    assert run.job("t")["reason"] == "TIMEOUT" and run.job("ok")["state"] == "COMPLETED"
    assert run.of("JobSubmitted", "t")[0].time_limit_s == 600
