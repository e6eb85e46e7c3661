"""Lab usage (F3), maintenance (§7) and the GPU pool (§1.2) projections on a real PostgreSQL.

Every GPU pool step is also folded by the dispatcher's fold (jpu.domain.cluster): the rows must
be its answer (P1), so a job's events come after its submission and promotion, as in any log."""

from __future__ import annotations

import itertools

import asyncpg
import pytest

from jpu.bus.model import Delivered
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.holdings import gpus as fold_rows
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    Event,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobSubmitted,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationStarted,
    UsageCharged,
    new_event_id,
    subject_for,
)
from jpu.store import apply_batch
from jpu.store.projection import Projection
from jpu.store.projections import gpu_resources, lab_usage, maintenance
from jpu.store.projections.maintenance import read_maintenance

_seq = itertools.count(1)


async def feed(pool: asyncpg.Pool, projection: Projection, *events: Event) -> list[Delivered]:
    batch = [Delivered(next(_seq), subject_for(e), e, {}) for e in events]
    await apply_batch(pool, projection, batch)
    return batch


def kw(ts: float = 1.0) -> dict:
    return {"event_id": new_event_id(), "ts": ts}


# --- lab usage ------------------------------------------------------------------------------


def charged(lab: str, amount: float, value_after: float, as_of: float) -> UsageCharged:
    return UsageCharged(
        **kw(as_of), lab=lab, amount=amount, value_after=value_after, as_of=as_of, job_id="j1"
    )


async def test_F3_usage_projection_follows_usage_charged(pool: asyncpg.Pool) -> None:
    # SPEC F1/F3 example values: one rtx4090 hour = 297,360 TFLOP-s
    await feed(
        pool,
        lab_usage.projection,
        charged("BCG", 24_000.0, 24_000.0, 0.0),
        charged("KDG", 28_000.0, 28_000.0, 0.0),
        charged("BCG", 297_360.0, 12_000.0 + 297_360.0, 604_800.0),
    )  # one half-life on
    rows = {r["lab"]: (r["value"], r["as_of"]) for r in await pool.fetch("SELECT * FROM lab_usage")}
    # the stored pair is exactly what accounting computed (value_after, as_of): F5 replays it
    assert rows == {"BCG": (309_360.0, 604_800.0), "KDG": (28_000.0, 0.0)}
    history = await pool.fetch(
        "SELECT lab, as_of, value, amount FROM usage_history WHERE lab = 'BCG' ORDER BY as_of"
    )
    assert [tuple(r) for r in history] == [
        ("BCG", 0.0, 24_000.0, 24_000.0),
        ("BCG", 604_800.0, 309_360.0, 297_360.0),
    ]


async def test_F3_last_charge_in_a_batch_wins(pool: asyncpg.Pool) -> None:
    await feed(
        pool, lab_usage.projection, *(charged("NLP", 1.0, float(v), float(v)) for v in range(1, 6))
    )
    assert await pool.fetchval("SELECT value FROM lab_usage WHERE lab = 'NLP'") == 5.0
    assert await pool.fetchval("SELECT count(*) FROM usage_history") == 5


# --- maintenance ----------------------------------------------------------------------------


async def test_M5_maintenance_defaults_to_normal_and_follows_changes(pool: asyncpg.Pool) -> None:
    assert (await read_maintenance(pool))["state"] == "NORMAL"
    await feed(
        pool,
        maintenance.projection,
        MaintenanceChanged(**kw(10.0), state="DRAINING", by="admin", message="NFS work"),
    )
    assert await read_maintenance(pool) == {
        "state": "DRAINING",
        "since": 10.0,
        "message": "NFS work",
        "by": "admin",
    }
    await feed(
        pool,
        maintenance.projection,
        MaintenanceChanged(**kw(20.0), state="BACKFILL_RECOVERY", by="dispatcher"),
        MaintenanceChanged(**kw(30.0), state="ACTIVE", by="dispatcher"),
    )
    assert (await read_maintenance(pool))["state"] == "ACTIVE"
    assert await pool.fetchval("SELECT count(*) FROM maintenance") == 1


# --- GPU pool -------------------------------------------------------------------------------


def inventory(node: str = "n1", n: int = 2, **extra) -> NodeInventoryObserved:
    return NodeInventoryObserved(**kw(), node=node, gpus={"rtx4090": n}, **extra)


async def states(pool: asyncpg.Pool, node: str = "n1") -> list[str]:
    rows = await pool.fetch("SELECT state FROM gpu_resources WHERE node = $1 ORDER BY index", node)
    return [r["state"] for r in rows]


def queued(job_id: str) -> list[Event]:
    """A job's submission and promotion: the dispatcher's fold moves no job it never saw."""
    submitted = JobSubmitted(
        **kw(), job_id=job_id, lab="L", user="u", name="n", command="c", num_gpus=1
    )
    return [submitted, JobPromoted(**kw(), job_id=job_id, queue_entered_at=1.0)]


@pytest.fixture
async def gpus(pool: asyncpg.Pool):
    fold = ClusterState(keep_ended=False)  # as the dispatcher folds

    async def go(*events: Event) -> list[str]:
        for d in await feed(pool, gpu_resources.projection, *events):
            evolve(fold, d)
        shown = await states(pool)
        answer = [g.state for g in fold_rows(fold) if g.node == "n1"]
        assert shown[: len(answer)] == answer  # the dispatcher's pool, row for row
        assert set(shown[len(answer) :]) <= {"down"}  # GPUs no longer reported stay down
        return shown

    return go


async def test_P1_inventory_creates_and_downs_rows(gpus, pool: asyncpg.Pool) -> None:
    assert await gpus(inventory(n=2)) == ["free", "free"]
    assert await gpus(inventory(n=2, down={"rtx4090": [1]})) == ["free", "down"]
    assert await gpus(inventory(n=3)) == ["free", "free", "free"]  # recovered and grown
    assert await gpus(inventory(n=1)) == ["free", "down", "down"]  # GPUs removed
    await feed(
        pool,
        gpu_resources.projection,
        NodeInventoryObserved(**kw(), node="n2", gpus={"rtx4090": 1, "rtx3080ti": 2}),
    )
    placements = await pool.fetch(
        "SELECT node, tier, count(*) FILTER (WHERE state <> 'down') AS capacity "
        "FROM gpu_resources GROUP BY node, tier ORDER BY node, tier"
    )
    assert [tuple(r) for r in placements] == [
        ("n1", "rtx4090", 1),
        ("n2", "rtx3080ti", 2),
        ("n2", "rtx4090", 1),
    ]


async def test_reservation_dispatch_and_end_move_gpu_states(gpus) -> None:
    def res(cls, gpus_, **extra):
        return cls(**kw(), job_id="x", node="n1", tier="rtx4090", gpus=gpus_, **extra)

    await gpus(inventory(n=2), *queued("x"))
    assert await gpus(res(ReservationStarted, [0])) == ["reserved:x", "free"]
    assert await gpus(res(ReservationGrown, [0, 1])) == ["reserved:x", "reserved:x"]
    # dispatch first, then the release (reason dispatched) finds nothing of its own to free
    assert await gpus(res(JobDispatched, [0, 1], attempt=1)) == ["job:x", "job:x"]
    assert await gpus(
        res(ReservationReleased, [0, 1], reason="dispatched", gpu_seconds=1.0, charged_now=False)
    ) == ["job:x", "job:x"]
    ended = JobEnded(
        **kw(), job_id="x", attempt=1, state="COMPLETED", node="n1", tier="rtx4090", gpus=[0, 1]
    )
    assert await gpus(ended) == ["free", "free"]


async def test_R3_demotion_frees_reserved_gpus(gpus) -> None:
    await gpus(inventory(n=2), *queued("x"))
    await gpus(ReservationStarted(**kw(), job_id="x", node="n1", tier="rtx4090", gpus=[0, 1]))
    assert await gpus(
        ReservationReleased(
            **kw(),
            job_id="x",
            node="n1",
            tier="rtx4090",
            gpus=[0, 1],
            reason="demoted",
            gpu_seconds=10.0,
            charged_now=True,
        )
    ) == ["free", "free"]


async def test_B2_dispatch_preempts_backfill_and_its_late_end_changes_nothing(gpus) -> None:
    await gpus(inventory(n=2))
    bf = {"backfill_id": "b1", "node": "n1", "tier": "rtx4090", "gpu": 1}
    assert await gpus(BackfillStarted(**kw(), **bf), *queued("y")) == ["free", "backfill:b1"]
    assert await gpus(
        JobDispatched(**kw(), job_id="y", attempt=1, node="n1", tier="rtx4090", gpus=[1])
    ) == ["free", "job:y"]
    assert await gpus(BackfillEnded(**kw(), **bf)) == ["free", "job:y"]


async def test_P2_gpus_of_a_drained_node_are_down_at_once(gpus) -> None:
    """A drained node takes no new work: its GPUs are down at once for the dispatcher, so here
    too, while its job still runs (not when the job releases them)."""
    await gpus(inventory(n=2), *queued("y"))
    await gpus(JobDispatched(**kw(), job_id="y", attempt=1, node="n1", tier="rtx4090", gpus=[0]))
    assert await gpus(inventory(n=2, state="drain")) == ["down", "down"]
    assert await gpus(JobEnded(**kw(), job_id="y", attempt=1, state="COMPLETED")) == [
        "down",
        "down",
    ]
    assert await gpus(inventory(n=2)) == ["free", "free"]  # undrained


async def test_node_down_loses_everything_on_it(gpus) -> None:
    await gpus(inventory(n=2), *queued("y"))
    await gpus(JobDispatched(**kw(), job_id="y", attempt=1, node="n1", tier="rtx4090", gpus=[0]))
    assert await gpus(inventory(n=2, state="down")) == ["down", "down"]
    assert await gpus(
        JobEnded(**kw(), job_id="y", attempt=1, state="FAILED", reason="NODE_FAIL")
    ) == ["down", "down"]
