"""The GPU pool (SPEC §1.2): one row per physical GPU, state ∈ free | job:<id> | reserved:<id> |
backfill:<id> | down. Placements are `GROUP BY (node, tier)` of these rows (P1).

There is no second pool here: every row is the domain's answer, the one the dispatcher decides
on (jpu.domain.cluster, jpu.domain.holdings). A row keeps that answer's facts — `available`
(present, up and not drained: `observed`), `holder` (`hold`, moved by the holding job's JobView)
and `backfill_id` (`backfilled`) — and `state` is `gpu_state` of them. A node drained under a
running job is therefore `down` at once, as the dispatcher sees it, not when the job releases.

Who holds a GPU follows from the holding job's JobView (its reservation, its placement), folded
by the services' own `apply_job_event`: `gpu_resources_jobs` keeps the views of jobs not final
yet (S2, X8), and drops a job's view once nothing can move it again. A GPU no inventory reports
any more keeps its row, `down` (the dispatcher no longer counts it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, NamedTuple

import asyncpg
import msgspec

from jpu.bus.model import Delivered
from jpu.domain.arrays import tasks_of
from jpu.domain.cluster import backfilled, hold, observed
from jpu.domain.holdings import gpu_state
from jpu.domain.states import GpuKey, JobView, apply_job_event
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobEvent,
    JobSubmitted,
    NodeInventoryObserved,
)

_LOAD: Final = (
    "SELECT node, tier, index, state, available, holder, backfill_id, updated_seq "
    "FROM gpu_resources WHERE node = ANY($1::text[])"
)
_UPSERT: Final = (
    "INSERT INTO gpu_resources (node, tier, index, state, available, holder, backfill_id, "
    "updated_seq) SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], "
    "$5::bool[], $6::text[], $7::text[], $8::bigint[]) ON CONFLICT (node, tier, index) DO UPDATE "
    "SET state = EXCLUDED.state, available = EXCLUDED.available, holder = EXCLUDED.holder, "
    "backfill_id = EXCLUDED.backfill_id, updated_seq = EXCLUDED.updated_seq"
)
_VIEWS: Final = "SELECT job_id, view::text AS view FROM gpu_resources_jobs WHERE job_id = ANY($1)"
_PUT_VIEWS: Final = (
    "INSERT INTO gpu_resources_jobs (job_id, view) SELECT j, v::jsonb FROM "
    "unnest($1::text[], $2::text[]) AS t(j, v) ON CONFLICT (job_id) DO UPDATE SET view = "
    "EXCLUDED.view"
)
_DROP_VIEWS: Final = "DELETE FROM gpu_resources_jobs WHERE job_id = ANY($1::text[])"
_view_json: Final = msgspec.json.Encoder(order="deterministic")
_view_decoder: Final = msgspec.json.Decoder(JobView)


class Row(NamedTuple):
    state: str
    available: bool
    holder: str | None
    backfill_id: str | None
    updated_seq: int


class _Pool:
    """The GPUs of the nodes a batch touches, as the domain's facts, and the views of its jobs.

    Complete for the batch: a job event moves GPUs of the node it names or of the nodes its
    view holds (reservation, placement); both are loaded before the batch is folded."""

    def __init__(self, rows: dict[GpuKey, Row], views: dict[str, JobView]) -> None:
        self.rows = rows
        self.views = views
        self.exists = set(rows)  # the GPUs an inventory ever reported: the ones with a row
        self.unavailable = {k for k, r in rows.items() if not r.available}
        self.holders = {k: r.holder for k, r in rows.items() if r.holder is not None}
        self.backfill = {k: r.backfill_id for k, r in rows.items() if r.backfill_id is not None}
        self.changed_views: set[str] = set()
        self.changed: set[GpuKey] = set()

    def apply(self, d: Delivered) -> None:
        e = d.event
        if isinstance(e, NodeInventoryObserved):
            inventory, down = observed(e)
            present = {(n, t, i) for (n, t), count in inventory.items() for i in range(count)}
            node = {k for k in self.exists if k[0] == e.node} | present
            self.exists |= present
            self.unavailable -= node
            self.unavailable |= down | (node - present)  # a GPU no longer reported: down
            self._show(node, d.seq)
        elif isinstance(e, BackfillStarted | BackfillEnded):
            backfilled(self.backfill, e)
            self._show([(e.node, e.tier, e.gpu)], d.seq)
        elif isinstance(e, JobSubmitted):
            for task in tasks_of(e):  # an array's one event: each task a job (Q7)
                if task.job_id not in self.views:  # a second submit never wins (E2)
                    self.views[task.job_id] = JobView.submitted(task, d.seq)
                    self.changed_views.add(task.job_id)
        elif isinstance(e, JobEvent) and (job := self.views.get(e.job_id)) is not None:
            before = job.gpu_holdings()
            apply_job_event(job, d)  # the services' own fold (jpu.domain.states)
            after = job.gpu_holdings()
            self.changed_views.add(e.job_id)
            if before == after and all(self.holders.get(k) == t for k, t in after.items()):
                return  # most events move no GPU: `hold` and the rows (P1) would stay as they are
            hold(self.holders, before, after)
            self._show([*before, *after], d.seq)

    def _show(self, keys: Iterable[GpuKey], seq: int) -> None:
        """The rows of `keys` as the domain now answers; `updated_seq` is the event that last
        changed one (whatever the batches: a live run and a rebuild write the same rows)."""
        for key in keys:
            if key not in self.exists:
                continue  # a GPU no inventory ever reported has no row (the domain has none)
            down = key in self.unavailable
            holder, bf = self.holders.get(key), self.backfill.get(key)
            new = Row(gpu_state(down, holder, bf), not down, holder, bf, seq)
            old = self.rows.get(key)
            if old is None or new[:4] != old[:4]:
                self.rows[key] = new
                self.changed.add(key)


def _nodes(batch: list[Delivered], views: dict[str, JobView]) -> set[str]:
    """The nodes whose GPUs the batch can move: the ones its events name, and the ones its
    jobs' views hold GPUs of."""
    nodes = {n for d in batch if isinstance(n := getattr(d.event, "node", None), str)}
    nodes.update(g[0] for v in views.values() for g in v.gpu_holdings())
    return nodes


class GpuResourcesProjection:
    name = "gpu_resources"
    tables: tuple[str, ...] = ("gpu_resources", "gpu_resources_jobs")

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        await self.apply_many(conn, [d])

    async def apply_many(self, conn: asyncpg.Connection, batch: list[Delivered]) -> None:
        """Load the batch's job views and GPU rows, fold the batch in memory with the domain's
        functions, write each changed row and view once."""
        ids = sorted({d.event.job_id for d in batch if isinstance(d.event, JobEvent)})
        found = await conn.fetch(_VIEWS, ids) if ids else []
        views = {r["job_id"]: _view_decoder.decode(r["view"]) for r in found}
        nodes = _nodes(batch, views)
        if not nodes and not ids:
            return
        rows = await conn.fetch(_LOAD, sorted(nodes)) if nodes else []  # a submit moves none
        pool = _Pool(
            {(r["node"], r["tier"], r["index"]): Row(r["state"], r["available"], r["holder"],
                                                     r["backfill_id"], r["updated_seq"])
             for r in rows},
            views,
        )  # fmt: skip
        for d in batch:
            pool.apply(d)
        await _write(conn, pool)


async def _write(conn: asyncpg.Connection, pool: _Pool) -> None:
    if pool.changed:
        keys = sorted(pool.changed)
        new = [pool.rows[k] for k in keys]
        await conn.execute(
            _UPSERT,
            [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys],
            [r.state for r in new], [r.available for r in new], [r.holder for r in new],
            [r.backfill_id for r in new], [r.updated_seq for r in new],
        )  # fmt: skip
    final = sorted(j for j in pool.changed_views if pool.views[j].final)
    kept = sorted(j for j in pool.changed_views if not pool.views[j].final)
    if kept:
        encoded = [_view_json.encode(pool.views[j]).decode() for j in kept]
        await conn.execute(_PUT_VIEWS, kept, encoded)
    if final:  # S2: nothing moves it again, so it can hold nothing more
        await conn.execute(_DROP_VIEWS, final)


projection = GpuResourcesProjection()
