"""The simulator plays job arrays (SPEC Q7) and holds (Q9) as the services do: an array is one
submit whose tasks the fold derives (jpu.domain.arrays.tasks_of), promoted under `%N` by
jpu.domain.promotion; a held job waits for its workload's `release_s`."""

from __future__ import annotations

from pathlib import Path

import pytest

from jpu.sim.audit import audit_dir
from jpu.sim.params import SimParams
from jpu.sim.run import run_files
from jpu.sim.workload import WorkloadError, parse_lines
from jpu.testing.simkit import Run, Simulate

TASKS = [f"sweep_{k}" for k in range(10)]


def job(id: str, user: str = "u1", **kw: object) -> dict[str, object]:
    return {"id": id, "lab": "L1", "user": user, "submit_s": 0, "num_gpus": 1,
            "duration_s": 600, **kw}  # fmt: skip


def slot_holders_over_time(run: Run, ids: set[str]) -> list[int]:
    """How many of `ids` hold a slot (S1: promoted, not yet ended) after each event."""
    holding: set[str] = set()
    counts = []
    for e in run.events:
        kind, jid = type(e).__name__, getattr(e, "job_id", None)
        if jid in ids and kind == "JobPromoted":
            holding.add(jid)
        elif jid in ids and kind == "JobEnded":
            holding.discard(jid)
        counts.append(len(holding))
    return counts


def test_Q7_sim_throttle_never_exceeded(simulate: Simulate) -> None:
    # the user may hold 5 slots (Q5), the array's %2 allows 2 of its tasks; a single job of the
    # same user still takes a slot the throttle leaves free
    labs = [{"name": "L1", "users": [{"name": "u1", "max_active_jobs": 5}]}]
    run = simulate([job("sweep", array="0-9%2"), job("solo", submit_s=1)], labs=labs)
    counts = slot_holders_over_time(run, set(TASKS))
    assert max(counts) == 2  # reached, never exceeded
    assert len(run.of("JobSubmitted")) == 2  # one event for the whole array, one for solo
    assert {run.job(t)["state"] for t in TASKS} == {"COMPLETED"}
    assert run.of("JobStarted", "solo")[0].ts == 1.0  # not queued behind the throttled tasks


def test_Q7_sim_every_task_charged_once(simulate: Simulate) -> None:
    run = simulate([job("sweep", array="0-9%2")])
    for t in TASKS:
        charges = [c for c in run.of("UsageCharged") if c.job_id == t]
        ends = run.of("JobEnded", t)
        assert len(ends) == 1 and len(charges) == 1, t
        assert charges[0].amount == pytest.approx(ends[0].usage)
        assert run.job(t)["charged_tflop_s"] == pytest.approx(ends[0].usage)
    assert audit_dir(run.out).ok


def test_Q7_sim_tasks_are_jobs_of_their_own_with_the_array_env(simulate: Simulate) -> None:
    run = simulate([job("sweep", array="1,5,9")])
    (submit,) = run.of("JobSubmitted")
    assert submit.array is not None and submit.array.tasks == [1, 5, 9]
    assert {e.job_id for e in run.of("JobStarted")} == {"sweep_1", "sweep_5", "sweep_9"}
    assert set(run.summary["jobs"]) == {"sweep_1", "sweep_5", "sweep_9"}


def test_Q7_sim_a_task_id_clashing_with_another_job_is_refused(simulate: Simulate) -> None:
    with pytest.raises(WorkloadError, match="sweep_1"):
        simulate([job("sweep", array="0-2"), job("sweep_1")])


def test_Q9_sim_held_job_not_started_before_its_release(simulate: Simulate) -> None:
    run = simulate([job("h", hold=True, release_s=900), job("free", submit_s=1)])
    (released,) = run.of("JobReleased", "h")
    assert released.ts == 900.0
    assert run.of("JobPromoted", "h")[0].ts >= 900.0  # held: no slot before its release
    assert run.of("JobStarted", "h")[0].ts >= 900.0
    assert run.of("JobStarted", "free")[0].ts == 1.0  # the idle GPUs did not wait for h
    assert run.job("h")["state"] == "COMPLETED"


def test_Q9_sim_held_array_tasks_all_released(simulate: Simulate) -> None:
    run = simulate([job("sweep", array="0-3%1", hold=True, release_s=60)])
    assert len(run.of("JobReleased")) == 4
    assert min(e.ts for e in run.of("JobStarted")) >= 60.0
    assert max(slot_holders_over_time(run, {f"sweep_{k}" for k in range(4)})) == 1


@pytest.mark.parametrize(
    "line",
    [
        '{"id":"h","lab":"L","user":"u","submit_s":0,"num_gpus":1,"duration_s":1,"hold":true}',
        '{"id":"h","lab":"L","user":"u","submit_s":0,"num_gpus":1,"duration_s":1,"release_s":5}',
        '{"id":"a","lab":"L","user":"u","submit_s":0,"num_gpus":1,"duration_s":1,"array":"3-1"}',
    ],
)
def test_Q9_Q7_sim_workload_hold_needs_release_and_array_must_parse(line: str) -> None:
    with pytest.raises(WorkloadError, match="<workload>:1: "):
        list(parse_lines([line]))


def test_sample_workload_plays_its_sweep_and_held_job_and_audits(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    out = tmp_path / "sample"
    summary = run_files(
        root / "config/sample-cluster.yaml", root / "data/sample-workload.jsonl", out, SimParams()
    )
    sweep = [j for j in summary["jobs"] if j.startswith("kdg-lr-sweep_")]
    assert len(sweep) == 8 and all(summary["jobs"][j]["state"] == "COMPLETED" for j in sweep)
    assert summary["jobs"]["osl-held"]["state"] == "COMPLETED"
    assert audit_dir(out).ok
