"""The global queue as the API shows it: rank (SPEC D1) and pending reason (D7), read-only.

Rank and pending reason are what the dispatcher decided, not a second cycle of the gateway's own
(SPEC D7): the leading dispatcher publishes each cycle's order and reasons to the NATS
KV bucket `jpu_views` (jpu_services.dispatcher.view, jpu.bus.views), and the gateway shows exactly
that, with the time it was decided (`decided_at`). A queued job the last published cycle has not
seen yet (it entered the queue after it) has no rank and no reason until the next cycle, which D8
triggers at once; a job that cycle dispatched has none either (it is on its way to the GPUs).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import asyncpg
from fastapi import FastAPI, Request

from jpu import commands
from jpu.bus.views import ViewStore
from jpu.domain.states import PENDING, in_order
from jpu.explain.estimate import served_start
from jpu.policy.fairshare import ZERO_USAGE, decayed
from jpu.policy.model import LabUsage
from jpu.store.projections.maintenance import read_maintenance

PERSONAL: Final = "PERSONAL_QUEUE_WAIT"
_QUEUE_SQL: Final = (
    'SELECT job_id, lab, "user", name, num_gpus, tiers, min_vram_gb, time_limit_s, state, '
    "attempt, queue_entered_at, submitted_at, reservation_node, reservation_tier, "
    "reservation_gpus, reservation_since, array_id, "
    "(view->>'array_throttle')::int AS array_throttle FROM jobs "
    "WHERE state = ANY($1::text[]) ORDER BY queue_entered_at NULLS LAST, submitted_at, job_id"
)


@dataclass
class QueuePage:
    """The queue as the API shows it (`GET /v1/queue`, a job's rank): global by rank, personal."""

    now: float
    maintenance: str
    ordered: list[Any]  # global queue rows, rank 1 first
    personal: list[Any]  # personal-queue rows (Q4), oldest first
    usage: dict[str, float]  # lab -> decayed usage now
    reasons: dict[str, str] = field(default_factory=dict)
    ranked: int = 0  # the first `ranked` of `ordered` have the dispatcher's rank; the rest none
    decided_at: float | None = None  # the dispatcher's cycle these ranks and reasons come from
    estimates: commands.EstimatesView | None = None  # U4: the dispatcher's latest estimate
    _ranks: dict[str, int] | None = None  # job id -> rank, built on first use (shared views)
    _why: dict[str, str] | None = None  # job id -> why its start is unknown, likewise

    def rank(self, i: int) -> int | None:
        """The rank of `ordered[i]` (0-based), None for a job no cycle has ranked yet."""
        return i + 1 if i < self.ranked else None

    def estimate_of(self, job_id: str, now: float) -> dict[str, Any]:
        """SPEC U4: `estimated_start` (null: unknown or not estimated yet), `estimate_basis`
        (limits | predicted | unknown; null: no estimate has seen this job yet) and
        `estimated_at` (the dispatcher's time the estimate was computed for); with no start,
        `estimate_reason` says why (maintenance, the jobs holding the GPUs have no limit and
        no prediction, the horizon, or no estimate has covered the job yet). `now`: the
        answer's time; a start is never served before it."""
        est = self.estimates
        got = est.jobs.get(job_id) if est is not None else None
        reason = None
        if got is None:
            reason = "not estimated yet: the dispatcher's next estimate will cover it"
        elif got[0] is None and est is not None:
            if self._why is None:
                self._why = {j: why for why, ids in est.why.items() for j in ids}
            reason = self._why.get(job_id) or "the estimate found no start for it"
        return {
            "estimated_start": served_start(got[0], now) if got else None,
            "estimate_basis": got[1] if got else None,
            "estimated_at": est.at if est is not None and got else None,
            "estimate_reason": reason,
        }

    def rank_of(self, job_id: str) -> tuple[int | None, str | None]:
        """D1/D7 of a global-queue job; a personal-queue job has no rank, and its reason is the
        domain's on the gateway's fold (jpu_services.gateway.personal)."""
        if self._ranks is None:
            self._ranks = {row["job_id"]: i for i, row in enumerate(self.ordered)}
        rank = self._ranks.get(job_id)
        if rank is None:
            return None, None
        return self.rank(rank), self.reasons.get(job_id)


async def _snapshot_parts(
    pool: asyncpg.Pool,
) -> tuple[list[asyncpg.Record], dict[str, LabUsage], str]:
    rows = await pool.fetch(_QUEUE_SQL, list(in_order(PENDING)))
    usage = {
        r["lab"]: LabUsage(r["value"], r["as_of"])
        for r in await pool.fetch("SELECT lab, value, as_of FROM lab_usage")
    }
    maintenance = (await read_maintenance(pool))["state"]
    return rows, usage, str(maintenance)


async def queue_view(
    pool: asyncpg.Pool,
    decision: commands.QueueView | None,
    half_life_s: float,
    now: float,
    estimates: commands.EstimatesView | None = None,
) -> QueuePage:
    rows, usage, maintenance = await _snapshot_parts(pool)
    queued = {r["job_id"]: r for r in rows if r["state"] != PERSONAL}
    order = [j for j in (decision.order if decision else []) if j in queued]
    reasons = {j: r for j, r in (decision.pending if decision else {}).items() if j in queued}
    ranked = set(order)
    newer = [r for r in queued.values() if r["job_id"] not in ranked]  # after that cycle
    labs = {r["lab"] for r in rows} | set(usage)
    personal = [r for r in rows if r["state"] == PERSONAL]
    return QueuePage(
        now=now,
        maintenance=maintenance,
        ordered=[queued[j] for j in order] + newer,
        personal=personal,
        usage={lab: decayed(usage.get(lab, ZERO_USAGE), now, half_life_s) for lab in labs},
        reasons=reasons,
        ranked=len(order),
        decided_at=decision.at if decision else None,
        estimates=estimates,
    )


class SharedView:
    """One queue view computation serves every request waiting at once (single flight).

    A request joins the next computation that has not started yet; a computation starts only
    once the previous one finished, so every view a request gets was read from the database
    after the request asked — read-your-writes is kept (a job just submitted has its rank).
    Under load the O(queue) cost is shared by all the requests that came in meanwhile, instead
    of being paid once per request.
    """

    def __init__(self, compute: Callable[[], Awaitable[QueuePage]]) -> None:
        self.compute = compute
        self._next: asyncio.Future[QueuePage] | None = None
        self._one_at_a_time = asyncio.Lock()

    async def get(self) -> QueuePage:
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            asyncio.create_task(self._run(self._next))  # noqa: RUF006 (the future holds it)
        return await asyncio.shield(self._next)

    async def _run(self, fut: asyncio.Future[QueuePage]) -> None:
        async with self._one_at_a_time:
            self._next = None  # from now on, newcomers wait for a later computation
            try:
                fut.set_result(await self.compute())
            except Exception as e:
                fut.set_exception(e)


def new_shared_view(app: FastAPI) -> SharedView:
    """The app's SharedView over its pool, tiers, half-life and clock (built in the lifespan)."""
    views = ViewStore(app.state.edges.bus)  # caches the decoded views between puts

    async def compute() -> QueuePage:
        base = app.state.settings.base
        clock = getattr(app.state, "clock", None)
        now = float(clock.now()) if clock is not None else time.time()
        edges = app.state.edges
        decision, estimates = await asyncio.gather(views.queue(), views.estimates())
        return await queue_view(edges.pool, decision, base.half_life_s, now, estimates)

    return SharedView(compute)


def shared_view(request: Request) -> SharedView:
    view: SharedView = request.app.state.queue_view
    return view
