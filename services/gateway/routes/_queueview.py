"""The global queue as the API shows it: rank (SPEC D1) and pending reason (D7), read-only.

Rank is a position in a cycle, not a property of the job (D1), so the gateway recomputes it at
request time: the policy core's pure dispatch cycle (`jpu.policy.cycle`) runs on a snapshot built
from the projections and gives the order and the pending reasons; its decisions are discarded —
nothing is appended, the gateway only reads (the dispatcher alone acts).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import asyncpg
from fastapi import Request

from jpu.config import Tier
from jpu.policy.cycle import cycle
from jpu.policy.fairshare import ZERO_USAGE, decayed
from jpu.policy.model import Gpu, LabUsage, QueuedJob, Reservation, Snapshot
from jpu.store.projections.maintenance import read_maintenance

PERSONAL: Final = "PERSONAL_QUEUE_WAIT"
_QUEUE_SQL: Final = (
    'SELECT job_id, lab, "user", name, num_gpus, tiers, min_vram_gb, time_limit_s, state, '
    "attempt, queue_entered_at, submitted_at, reservation_node, reservation_tier, "
    "reservation_gpus, reservation_since FROM jobs "
    "WHERE state = ANY($1::text[]) ORDER BY queue_entered_at NULLS LAST, submitted_at, job_id"
)


@dataclass
class QueueView:
    now: float
    maintenance: str
    ordered: list[Any]  # global queue rows, rank 1 first
    personal: list[Any]  # personal-queue rows (Q4), oldest first
    usage: dict[str, float]  # lab -> decayed usage now
    reasons: dict[str, str] = field(default_factory=dict)
    _ranks: dict[str, int] | None = None  # job id -> rank, built on first use (shared views)

    def rank_of(self, job_id: str) -> tuple[int | None, str | None]:
        if self._ranks is None:
            self._ranks = {row["job_id"]: i for i, row in enumerate(self.ordered, start=1)}
            self._ranks.update((r["job_id"], 0) for r in self.personal)
        rank = self._ranks.get(job_id)
        if rank is None:
            return None, None
        if rank == 0:
            return None, "ConcurrencyLimit"
        return rank, self.reasons.get(job_id)


def _queued(row: Any) -> QueuedJob:
    res = None
    if row["reservation_node"] is not None:
        res = Reservation(
            node=row["reservation_node"],
            tier=row["reservation_tier"],
            gpus=tuple(row["reservation_gpus"] or ()),
            since=row["reservation_since"] or 0.0,
        )
    return QueuedJob(
        job_id=row["job_id"],
        lab=row["lab"],
        user=row["user"],
        num_gpus=row["num_gpus"],
        queue_entered_at=row["queue_entered_at"] or row["submitted_at"],
        tiers=frozenset(row["tiers"]) if row["tiers"] is not None else None,
        min_vram_gb=row["min_vram_gb"],
        attempt=row["attempt"],
        reservation=res,
        time_limit_s=row["time_limit_s"],
    )


async def _snapshot_parts(
    pool: asyncpg.Pool,
) -> tuple[list[asyncpg.Record], dict[str, LabUsage], list[Gpu], str]:
    rows = await pool.fetch(_QUEUE_SQL, [PERSONAL, "GLOBAL_QUEUE_WAIT", "RESERVING"])
    usage = {
        r["lab"]: LabUsage(r["value"], r["as_of"])
        for r in await pool.fetch("SELECT lab, value, as_of FROM lab_usage")
    }
    gpus = [
        Gpu(r["node"], r["tier"], r["index"], r["state"])
        for r in await pool.fetch("SELECT node, tier, index, state FROM gpu_resources")
    ]
    maintenance = (await read_maintenance(pool))["state"]
    return rows, usage, gpus, str(maintenance)


async def queue_view(
    pool: asyncpg.Pool, tiers: list[Tier], half_life_s: float, now: float
) -> QueueView:
    rows, usage, gpus, maintenance = await _snapshot_parts(pool)
    by_id = {r["job_id"]: r for r in rows}
    queue = [_queued(r) for r in rows if r["state"] != PERSONAL]
    snap = Snapshot(
        tiers={t.name: t for t in tiers},
        gpus=gpus,
        queue=queue,
        usage=usage,
        half_life_s=half_life_s,
        maintenance=maintenance,  # type: ignore[arg-type]
    )
    # D1 order and D7 reasons: the pure cycle on this snapshot; its decisions are discarded
    # (read-only). A job the cycle would dispatch now has no reason to wait: "None" (as Slurm
    # says) until the dispatcher starts it.
    result = cycle(snap, now)
    reasons: dict[str, str] = dict.fromkeys(result.order, "None")
    reasons.update(result.pending.items())
    labs = {r["lab"] for r in rows} | set(usage)
    return QueueView(
        now=now,
        maintenance=maintenance,
        ordered=[by_id[j] for j in result.order],
        personal=[r for r in rows if r["state"] == PERSONAL],
        usage={lab: decayed(usage.get(lab, ZERO_USAGE), now, half_life_s) for lab in labs},
        reasons=reasons,
    )


class SharedView:
    """One queue view computation serves every request waiting at once (single flight).

    A request joins the next computation that has not started yet; a computation starts only
    once the previous one finished, so every view a request gets was read from the database
    after the request asked — read-your-writes is kept (a job just submitted has its rank).
    Under load the O(queue) cost is shared by all the requests that came in meanwhile, instead
    of being paid once per request.
    """

    def __init__(self, compute: Callable[[], Awaitable[QueueView]]) -> None:
        self.compute = compute
        self._next: asyncio.Future[QueueView] | None = None
        self._one_at_a_time = asyncio.Lock()

    async def get(self) -> QueueView:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            asyncio.create_task(self._run(self._next))  # noqa: RUF006 (the future holds it)
        return await asyncio.shield(self._next)

    async def _run(self, fut: asyncio.Future[QueueView]) -> None:
        async with self._one_at_a_time:
            self._next = None  # from now on, newcomers wait for a later computation
            try:
                fut.set_result(await self.compute())
            except Exception as e:
                fut.set_exception(e)


def shared_view(request: Request) -> SharedView:
    """The app's SharedView (created on first use) over its pool, tiers, half-life and clock."""
    app = request.app
    view: SharedView | None = getattr(app.state, "queue_view", None)
    if view is None:

        async def compute() -> QueueView:
            base = app.state.settings.base
            clock = getattr(app.state, "clock", None)
            now = float(clock.now()) if clock is not None else time.time()
            return await queue_view(app.state.edges.pool, base.tiers, base.half_life_s, now)

        view = app.state.queue_view = SharedView(compute)
    return view
