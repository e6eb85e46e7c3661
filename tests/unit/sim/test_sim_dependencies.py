"""The simulator honours dependencies (SPEC Q8) with the services' own fold and promotion
(jpu.domain.promotion): a pipeline runs in order, a failed parent ends its dependents
DEPENDENCY_NEVER_SATISFIED, and a waiting job holds no slot."""

from __future__ import annotations

from jpu.testing.simkit import Simulate


def job(id: str, user: str = "u1", **kw: object) -> dict[str, object]:
    return {"id": id, "lab": "L1", "user": user, "submit_s": 0, "num_gpus": 1,
            "duration_s": 600, **kw}  # fmt: skip


def test_Q8_sim_pipeline_afterok_runs_in_order_across_users(simulate: Simulate) -> None:
    run = simulate([job("a"), job("b", user="u2", dependency="afterok:a"),
                    job("c", dependency="afterok:b")])  # fmt: skip
    started = {e.job_id: e.ts for e in run.of("JobStarted")}
    assert started == {"a": 0.0, "b": 600.0, "c": 1200.0}
    assert {run.job(j)["state"] for j in "abc"} == {"COMPLETED"}


def test_Q8_sim_failed_parent_ends_dependents_never_satisfied(simulate: Simulate) -> None:
    # a's time limit ends it before its 600 s of work (X6)
    run = simulate([
        job("a", time_limit_s=60), job("b", dependency="afterok:a"),
        job("c", dependency="afterok:b"), job("d", dependency="afternotok:a"),
    ])  # fmt: skip
    assert run.job("a")["state"] in ("FAILED", "CANCELLED")
    for j in ("b", "c"):
        assert (run.job(j)["state"], run.job(j)["reason"]) == (
            "CANCELLED",
            "DEPENDENCY_NEVER_SATISFIED",
        ), run.job(j)
        assert not run.of("JobPromoted", j)
    assert run.job("d")["state"] == "COMPLETED"


def test_Q8_sim_a_waiting_job_holds_no_slot(simulate: Simulate) -> None:
    labs = [{"name": "L1", "users": [{"name": "u1", "max_active_jobs": 2}]}]
    run = simulate([job("a", duration_s=600), job("w", dependency="afterok:a", submit_s=1),
                    job("x", submit_s=2)], labs=labs)  # fmt: skip
    started = {e.job_id: e.ts for e in run.of("JobStarted")}
    assert started == {"a": 0.0, "x": 2.0, "w": 600.0}  # x took the slot w did not hold
