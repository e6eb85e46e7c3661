"""Every policy runs through the same engine with one signature (STYLE: no `if simulate`)."""

from __future__ import annotations

import pytest

from jpu.policy import POLICIES
from jpu.testing.simkit import Simulate

ONE_GPU = [{"name": "n1", "gpus": {"rtx4090": 1}}]


def job(id: str, lab: str, submit_s: float, duration_s: float = 100) -> dict[str, object]:
    return {"id": id, "lab": lab, "user": f"{lab}-user", "submit_s": submit_s, "num_gpus": 1,
            "duration_s": duration_s}  # fmt: skip


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_SIM_every_policy_runs_the_same_workload(simulate: Simulate, policy: str) -> None:
    jobs = [job(f"j{i}", "AB"[i % 2], i * 10.0, 50 + i) for i in range(12)]
    jobs.append({**job("wide", "A", 5), "num_gpus": 2})
    run = simulate(jobs, policy=policy)
    assert run.summary["policy"] == policy
    assert run.summary["job_states"] == {"COMPLETED": 13}
    assert run.summary["parameters"]["policy"] == policy


@pytest.mark.parametrize(
    ("policy", "second"), [("jpu", "b1"), ("fifo", "a2"), ("slurm-like", "b1")]
)
def test_D1_fair_share_order_versus_fifo(simulate: Simulate, policy: str, second: str) -> None:
    """Lab A has heavy past usage. When the only GPU frees, fair-share policies pick lab B's job
    although A's was queued first; FIFO picks by queue entry."""
    labs = [{"name": "A", "usage": 1e9}]
    jobs = [job("a1", "A", 0), job("a2", "A", 1), job("b1", "B", 2)]
    run = simulate(jobs, labs=labs, nodes=ONE_GPU, policy=policy)
    at_100 = [e.job_id for e in run.of("JobDispatched") if e.ts == 100.0]
    assert at_100 == [second]


def test_fifo_never_reserves(simulate: Simulate) -> None:
    jobs = [job(f"a{i}", "A", 0, 100 * (i + 1)) for i in range(4)]
    jobs.append({**job("wide", "B", 10, 100), "num_gpus": 2})
    run = simulate(jobs, policy="fifo", nodes=[{"name": "n1", "gpus": {"rtx4090": 4}}])
    assert not run.of("ReservationStarted")
    jpu = simulate(jobs, policy="jpu", nodes=[{"name": "n1", "gpus": {"rtx4090": 4}}])
    assert jpu.of("ReservationStarted", "wide")
