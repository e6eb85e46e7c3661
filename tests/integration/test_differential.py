"""The differential test (SPEC E3): one log, three folds, one answer.

Logs of mixed workloads come from the simulator (the services' policy with a virtual clock:
reservations with swap and R3 demotion, OOM retries and OOM failures with no bigger tier,
cancellations in every state, backfill preemption). Each log is folded by the services' domain
fold (jpu.domain.cluster ClusterState) and applied to the SQL projections (jobs, lab_usage);
both must say what the simulator's own summary says: every job's state and attempts, and every
lab's usage (to 1e-6 relative). And at every cycle the simulator ran, the dispatcher's path on
the log folded so far (`jpu.domain.dispatch.snapshot` + `cycle`, what it publishes as the queue
view, D1/D7) gives the rank order and pending reasons the simulator's cycle had, on the same GPU
rows and running jobs.

The projections the gateway serves the GPU pool from (gpu_resources, backfill, maintenance) are
compared with the same fold after every batch, on those logs plus what operators and agents add
(drained, failed and down nodes, maintenance changes): `GET /v1/placements` shows the pool the
dispatcher decides on (P1).
"""

from __future__ import annotations

import random

import asyncpg
import msgspec
import pytest

from jpu.bus import Delivered
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dispatch import snapshot
from jpu.domain.holdings import gpus
from jpu.domain.promotion import personal_reasons, personal_standing
from jpu.domain.states import GpuKey
from jpu.events import (
    BackfillStarted,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobSubmitted,
    MaintenanceChanged,
    NodeInventoryObserved,
    subject_for,
)
from jpu.policy.cycle import cycle
from jpu.sim.engine import services_config
from jpu.store import apply_batch
from jpu.store.projections import backfill_instances, gpu_resources, jobs, lab_usage, maintenance
from jpu.store.projections.backfill_instances import live_instances
from jpu.store.projections.maintenance import read_maintenance
from jpu.testing.workloads import CLUSTER, SEEDS, seeded_params, seeded_run


@pytest.mark.parametrize("seed", SEEDS)
async def test_S1_F3_X8_fold_projections_and_simulator_agree(seed: int, pool: asyncpg.Pool) -> None:
    log, summary, _ = seeded_run(seed)
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
    log, _, cycles = seeded_run(seed)
    assert cycles, "the workload queues jobs, so the simulator ran cycles"
    config = services_config(CLUSTER, seeded_params(seed).resolved(CLUSTER))
    state = ClusterState.new(CLUSTER, keep_ended=False)  # as the dispatcher folds (SPEC O6)
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


@pytest.mark.parametrize("seed", SEEDS[:4])
async def test_D7_personal_queue_reasons_of_the_gateways_fold_are_the_explanations(
    seed: int, pool: asyncpg.Pool
) -> None:
    """D7 in the personal queue (Q5, Q7-Q9) has one owner, jpu.domain.promotion: the gateway
    asks it on its own fold of in-flight jobs (keep_ended=False, as the dispatcher folds, O6),
    `jpu why` and the queue at a past moment on the whole fold. After every event they give
    every personal-queue job the same reason, and after every batch the jobs projection the
    gateway reads its rows from holds exactly those jobs in PERSONAL_QUEUE_WAIT."""
    log, _, _ = seeded_run(seed)
    gateway = ClusterState.new(CLUSTER, keep_ended=False)
    whole = ClusterState.new(CLUSTER)
    seen: set[str] = set()
    applied = 0
    for i, d in enumerate(log, start=1):
        evolve(gateway, d)
        evolve(whole, d)
        queued = [j for q in whole.personal.values() for j in q]
        assert queued == [j for q in gateway.personal.values() for j in q], (seed, d.seq)
        served = personal_reasons(gateway, CLUSTER, queued)  # what the gateway answers
        for jid in queued:
            got = personal_standing(whole, CLUSTER, whole.jobs[jid])
            assert served[jid] == got[0], (seed, d.seq, jid)
            assert personal_standing(gateway, CLUSTER, gateway.jobs[jid]) == got, (seed, d.seq)
            seen.add(got[0])
        if i % 64 == 0 or i == len(log):
            await apply_batch(pool, jobs.projection, log[applied:i])
            applied = i
            rows = await pool.fetch("SELECT job_id FROM jobs WHERE state = 'PERSONAL_QUEUE_WAIT'")
            assert {r["job_id"] for r in rows} == set(queued), (seed, d.seq)
    assert seen, "some job waited in a personal queue"


def _logged(events: list) -> list[Delivered]:
    return [Delivered(i, subject_for(e), e, {}) for i, e in enumerate(events, start=1)]


async def _pool_rows(pool: asyncpg.Pool) -> dict[GpuKey, str]:
    rows = await pool.fetch("SELECT node, tier, index, state FROM gpu_resources")
    return {(r["node"], r["tier"], r["index"]): r["state"] for r in rows}


def _fold_rows(state: ClusterState) -> dict[GpuKey, str]:
    return {(g.node, g.tier, g.index): g.state for g in gpus(state)}


async def test_P1_drained_node_gpus_are_down_at_once_in_fold_and_projection(
    pool: asyncpg.Pool,
) -> None:
    """A node drained under a running job: the dispatcher's fold marks its GPUs down at once
    (no new work there, SPEC §1.2, P2); GET /v1/placements (the gpu_resources rows) must show
    the same pool at every step, not `job:<id>` until the job releases them."""
    node = NodeInventoryObserved(event_id="i1", ts=0.0, node="mixed", gpus={"rtx4090": 2})
    job = JobSubmitted(
        event_id="s", ts=1.0, job_id="j", lab="A", user="u", name="n", command="c", num_gpus=2
    )
    steps = [
        node,
        job,
        JobPromoted(event_id="p", ts=2.0, job_id="j", queue_entered_at=2.0),
        JobDispatched(
            event_id="d", ts=3.0, job_id="j", attempt=1, node="mixed", tier="rtx4090", gpus=[0, 1]
        ),
        msgspec.structs.replace(node, event_id="i2", ts=4.0, state="drain"),
        JobEnded(
            event_id="e",
            ts=5.0,
            job_id="j",
            attempt=1,
            state="COMPLETED",
            node="mixed",
            tier="rtx4090",
            gpus=[0, 1],
        ),
        msgspec.structs.replace(node, event_id="i3", ts=6.0),
    ]
    log = _logged(steps)
    state = ClusterState.new(CLUSTER)
    seen = []
    for d in log:
        evolve(state, d)
        await apply_batch(pool, gpu_resources.projection, [d])
        rows = await _pool_rows(pool)
        fold = _fold_rows(state)
        assert {k: rows[k] for k in fold if k[0] == "mixed"} == {
            k: v for k, v in fold.items() if k[0] == "mixed"
        }, (d.seq, type(d.event).__name__)
        seen.append(rows[("mixed", "rtx4090", 0)])
    assert seen[3:] == ["job:j", "down", "down", "free"]


def _operated(log: list[Delivered], seed: int) -> list[Delivered]:
    """The simulator's log with what operators and agents add: each node's inventory first (as
    the stack publishes it), then drains, undrains, failed GPUs, a node down, and maintenance
    changes at random points (SPEC §1.2, P2, §7)."""
    rng = random.Random(seed)
    events = [d.event for d in log]
    nodes = {n.name: dict(n.gpus) for n in CLUSTER.nodes}
    for _ in range(rng.randint(4, 10)):
        at = rng.randrange(len(events) + 1)
        ts = events[at - 1].ts if at else 0.0
        name = rng.choice(sorted(nodes))
        gpus_ = nodes[name]
        kind = rng.choice(["drain", "up", "down", "failed", "maintenance"])
        if kind == "maintenance":
            state = rng.choice(["DRAINING", "BACKFILL_RECOVERY", "ACTIVE", "NORMAL"])
            m = MaintenanceChanged(event_id=f"m{at}", ts=ts, state=state, by="admin", message=name)
            events.insert(at, m)
            continue
        tier = rng.choice(sorted(gpus_))
        down = {tier: [rng.randrange(gpus_[tier])]} if kind == "failed" else {}
        state = "up" if kind == "failed" else kind
        events.insert(
            at,
            NodeInventoryObserved(
                event_id=f"i{at}", ts=ts, node=name, gpus=gpus_, down=down, state=state
            ),
        )
    first = [
        NodeInventoryObserved(event_id=f"i-{n}", ts=0.0, node=n, gpus=g) for n, g in nodes.items()
    ]
    return _logged([*first, *events])


@pytest.mark.parametrize("seed", SEEDS)
async def test_P1_B1_M5_gpu_pool_backfill_and_maintenance_projections_are_the_fold(
    seed: int, pool: asyncpg.Pool
) -> None:
    """Every projection the gateway serves the pool from is the dispatcher's fold: after each
    batch (of random size, as a live projector or a rebuild cuts them) the gpu_resources rows
    are its GPU rows, the live backfill instances its backfill map, the maintenance row its
    maintenance state — drained and failed nodes, backfill and maintenance included."""
    log = _operated(seeded_run(seed)[0], seed)
    rng = random.Random(seed)
    state = ClusterState.new(CLUSTER, keep_ended=False)  # as the dispatcher folds
    i = 0
    while i < len(log):
        batch = log[i : i + rng.randint(1, 64)]
        i += len(batch)
        for d in batch:
            evolve(state, d)
        for projection in (gpu_resources, backfill_instances, maintenance):
            await apply_batch(pool, projection.projection, batch)
        rows, fold = await _pool_rows(pool), _fold_rows(state)
        assert {k: rows[k] for k in fold} == fold, (seed, batch[-1].seq)
        assert {v for k, v in rows.items() if k not in fold} <= {"down"}
        live = {
            (b["node"], b["tier"], b["gpu"]): b["backfill_id"] for b in await live_instances(pool)
        }
        assert live == state.backfill, (seed, batch[-1].seq)
        m = state.maintenance
        shown = {"state": m.state, "since": m.since, "message": m.message, "by": m.by}
        assert await read_maintenance(pool) == shown, (seed, batch[-1].seq)


def test_operated_logs_drain_fail_backfill_and_change_maintenance() -> None:
    """The logs above do cover what they are for: drained, failed and down nodes while jobs
    hold GPUs, backfill instances, maintenance changes."""
    kinds: set[str] = set()
    for seed in SEEDS:
        for d in _operated(seeded_run(seed)[0], seed):
            e = d.event
            if isinstance(e, NodeInventoryObserved):
                kinds.add("failed" if e.down else e.state)
            elif isinstance(e, BackfillStarted | MaintenanceChanged):
                kinds.add(type(e).__name__)
    assert kinds >= {"up", "drain", "down", "failed", "BackfillStarted", "MaintenanceChanged"}
