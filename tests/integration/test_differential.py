"""Issue 10's differential test: one log, three folds, one answer.

Logs of mixed workloads come from the simulator (the services' policy with a virtual clock:
reservations with swap and R3 demotion, OOM retries and OOM failures with no bigger tier,
cancellations in every state, backfill preemption). Each log is folded by the services' domain
fold (jpu.domain.cluster ClusterState) and applied to the SQL projections (jobs, lab_usage);
both must say what the simulator's own summary says: every job's state and attempts, and every
lab's usage (to 1e-6 relative). And at every cycle the simulator ran, the dispatcher's path on
the log folded so far (`jpu.domain.dispatch.snapshot` + `cycle`, what it publishes as the queue
view, D1/D7) gives the rank order and pending reasons the simulator's cycle had, on the same GPU
rows and running jobs.
"""

from __future__ import annotations

import io
import random

import asyncpg
import pytest

from jpu.bus import Delivered
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dispatch import snapshot
from jpu.events import JobSubmitted, decode, subject_for
from jpu.policy.cycle import cycle
from jpu.policy.model import CycleResult, QueuedJob, Snapshot
from jpu.sim.engine import services_config
from jpu.sim.params import SimParams
from jpu.sim.run import simulate
from jpu.sim.workload import WorkloadJob
from jpu.store import apply_batch
from jpu.store.projections import jobs, lab_usage
from jpu.testing.workloads import CLUSTER


def _workload(seed: int) -> list[WorkloadJob]:
    rng = random.Random(seed)
    out = []
    for i in range(rng.randint(8, 24)):
        out.append(
            WorkloadJob(
                id=f"j{i}",
                lab=rng.choice("ABC"),
                user=rng.choice(["u1", "u2", "u3", "u4"]),
                submit_s=float(rng.randint(0, 600)),
                num_gpus=rng.randint(1, 4),
                duration_s=float(rng.randint(0, 900)),
                peak_vram_gb=rng.choice([None, None, None, 16.0, 40.0]),  # OOM retry / no fit
                oom_after_s=float(rng.randint(1, 120)),
                cancel_s=rng.choice([None, None, float(rng.randint(0, 800))]),
            )
        )
    return sorted(out, key=lambda j: j.submit_s)


Cycle = tuple[int, float, Snapshot, list[QueuedJob], CycleResult]  # seq, time, ..., the queue


def _params(seed: int) -> SimParams:
    return SimParams(backfill=seed % 2 == 0, half_life_s=900, max_active_jobs=1 + seed % 3)


def _run(seed: int) -> tuple[list[Delivered], dict, list[Cycle]]:
    buf = io.BytesIO()
    cycles: list[Cycle] = []

    def seen(seq: int, now: float, snap: Snapshot, result: CycleResult) -> None:
        cycles.append((seq, now, snap, list(snap.queue), result))  # the queue moves on

    summary = simulate(CLUSTER, _workload(seed), _params(seed), buf, on_cycle=seen)
    events = [decode(line) for line in buf.getvalue().splitlines()]
    log = [Delivered(i, subject_for(e), e, {}) for i, e in enumerate(events, start=1)]
    return log, summary, cycles


SEEDS = list(range(12))


@pytest.mark.parametrize("seed", SEEDS)
async def test_S1_F3_X8_fold_projections_and_simulator_agree(seed: int, pool: asyncpg.Pool) -> None:
    log, summary, _ = _run(seed)
    state = ClusterState.new(CLUSTER)
    for d in log:
        evolve(state, d)
    for i in range(0, len(log), 64):
        batch = log[i : i + 64]
        await apply_batch(pool, jobs.projection, batch)
        await apply_batch(pool, lab_usage.projection, batch)
    rows = {r["job_id"]: r for r in await pool.fetch("SELECT job_id, state, attempt FROM jobs")}
    submitted = {d.event.job_id for d in log if isinstance(d.event, JobSubmitted)}
    assert submitted == set(rows) == set(state.jobs)
    for job_id, sim in summary["jobs"].items():
        if job_id not in submitted:
            assert sim["state"] == "REJECTED"  # refused at intake: never in the log
            continue
        fold = state.jobs[job_id]
        expected = (sim["state"], sim["attempts"])
        expected = (sim["state"], max(sim["attempts"], 1))  # attempt 1 before any dispatch
        assert (fold.state, fold.attempt) == expected, (seed, job_id, "fold")
        assert (rows[job_id]["state"], rows[job_id]["attempt"]) == expected, (seed, job_id, "sql")
        assert not fold.oom_pending  # X8: every OOM end was decided and recorded
    usage = {r["lab"]: r for r in await pool.fetch("SELECT lab, value, as_of FROM lab_usage")}
    for lab, sim in summary["labs"].items():
        if not sim["charged_tflop_s"] and not sim["initial_tflop_s"]:
            continue
        assert state.usage[lab].value == pytest.approx(sim["value"], rel=1e-6), (seed, lab)
        assert state.usage[lab].as_of == sim["as_of"]
        assert usage[lab]["value"] == pytest.approx(sim["value"], rel=1e-6), (seed, lab)
    assert state.owed == {}  # every charge the log owes was written by accounting's stand-in


@pytest.mark.parametrize("seed", SEEDS)
def test_D1_D7_simulator_cycles_rank_and_reasons_as_the_dispatcher_would(seed: int) -> None:
    """The dispatcher's path (its fold of the log so far, its snapshot, the cycle) at each of
    the simulator's cycles: the same queue order and pending reasons it would publish."""
    log, _, cycles = _run(seed)
    assert cycles, "the workload queues jobs, so the simulator ran cycles"
    config = services_config(CLUSTER, _params(seed).resolved(CLUSTER))
    state = ClusterState.new(CLUSTER, keep_ended=False)  # as the dispatcher folds (issue 11)
    events = iter(log)
    reasons = 0
    for seq, now, sim_snap, sim_queue, sim_result in cycles:
        while state.seq < seq:
            evolve(state, next(events))
        snap = snapshot(state, config)
        assert snap.gpus == sim_snap.gpus, (seed, seq, "GPU rows")
        assert sorted(snap.running, key=lambda r: r.job_id) == sorted(
            sim_snap.running, key=lambda r: r.job_id
        ), (seed, seq, "running jobs")
        assert (snap.usage, list(snap.queue)) == (sim_snap.usage, sim_queue), (seed, seq)
        result = cycle(snap, now)
        assert result.order == sim_result.order, (seed, seq, "rank order")
        assert dict(result.pending.items()) == dict(sim_result.pending.items()), (seed, seq)
        reasons += len(result.pending)
    assert reasons, "some job waited with a pending reason"
