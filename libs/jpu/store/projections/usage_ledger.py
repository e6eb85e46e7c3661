"""The usage ledger (SPEC F5): every `UsageCharged` with what it paid for, decided by the
pure `jpu.explain.usage.Ledger` (this module only loads and stores what that fold carries from
one batch to the next). explain-usage and the usage statement read it by index instead of
folding the whole log in the gateway (which took the whole log's read on each gateway's first
request: minutes on a year of log)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import asyncpg
import msgspec

from jpu.bus.model import Delivered
from jpu.domain.arrays import tasks_of
from jpu.events import JobEnded, JobSubmitted, ReservationReleased, ReservationShrunk, UsageCharged
from jpu.explain.usage import ChargeLine, Held, Ledger
from jpu.policy.charging import charge_id
from jpu.policy.model import LabUsage

_RELEVANT: Final = frozenset(
    {JobSubmitted, ReservationShrunk, ReservationReleased, JobEnded, UsageCharged}
)  # exact types: a set lookup per event (most events are none of these)
_held = msgspec.json.Decoder(list[Held])
_COLUMNS: Final = (
    'seq, charge_id, lab, reason, kind, job_id, attempt, "user", at, amount, held, value_after'
)
_INSERT_LINES: Final = (
    f"INSERT INTO usage_ledger ({_COLUMNS}) SELECT * FROM unnest($1::bigint[], $2::text[], "
    "$3::text[], $4::text[], $5::text[], $6::text[], $7::int[], $8::text[], $9::float8[], "
    "$10::float8[], $11::text[]::jsonb[], $12::float8[]) ON CONFLICT (seq) DO NOTHING"
)


def _lazy(job: str) -> str:
    return f"lazy:{job}"


def _src(charge: str) -> str:
    return f"src:{charge}"


def _keys(batch: Iterable[Delivered]) -> tuple[set[str], set[str]]:
    """(pending keys stored by earlier batches that this one may read, jobs whose owner a charge
    needs from earlier batches). A source is written by its own event (unique id), so only a
    charge whose source came in an earlier batch reads one; most are settled within a batch."""
    keys: set[str] = set()
    owners: set[str] = set()
    here: set[str] = set()  # source charge ids and submissions seen in this batch so far
    for d in batch:
        e = d.event
        if isinstance(e, JobSubmitted):
            here.update(job.job_id for job in tasks_of(e))  # Q7: an array's tasks
        elif isinstance(e, (ReservationShrunk, ReservationReleased, JobEnded)):
            keys.add(_lazy(e.job_id))
            if isinstance(e, (ReservationReleased, JobEnded)):
                here.add(charge_id(e.event_id))
        elif isinstance(e, UsageCharged):
            if e.event_id not in here:
                keys.add(_src(e.event_id))
            if e.job_id and e.job_id not in here:
                owners.add(e.job_id)
    return keys, owners


class UsageLedgerProjection:
    name = "usage_ledger"
    tables: tuple[str, ...] = ("usage_ledger", "usage_ledger_pending", "usage_ledger_jobs")

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        await self.apply_many(conn, [d])

    async def apply_many(self, conn: asyncpg.Connection, batch: list[Delivered]) -> None:
        batch = [d for d in batch if type(d.event) in _RELEVANT]
        if not batch:
            return
        keys, owners = _keys(batch)
        book = Ledger()
        loaded: list[str] = []
        if keys:
            for r in await conn.fetch(
                "SELECT key, held::text FROM usage_ledger_pending WHERE key = ANY($1::text[])",
                list(keys),
            ):
                loaded.append(r["key"])
                kind, _, ident = r["key"].partition(":")
                (book.lazy if kind == "lazy" else book.sources)[ident] = _held.decode(r["held"])
        if owners:
            for r in await conn.fetch(
                'SELECT job_id, lab, "user" FROM usage_ledger_jobs WHERE job_id = ANY($1::text[])',
                list(owners),
            ):
                book.users[r["job_id"]] = (r["lab"], r["user"])
        known = set(book.users)
        for d in batch:
            book.apply(d)  # the pure fold decides every line
        await _store_jobs(conn, {j: o for j, o in book.users.items() if j not in known})
        await _store_lines(conn, book.lines)
        pending = {_lazy(j): h for j, h in book.lazy.items()}
        pending.update((_src(c), h) for c, h in book.sources.items())
        if loaded:  # what was stored and is now settled or rewritten below
            await conn.execute(
                "DELETE FROM usage_ledger_pending WHERE key = ANY($1::text[])", loaded
            )
        if pending:  # one statement for the batch (unnest), not one per row
            await conn.execute(
                "INSERT INTO usage_ledger_pending (key, held) SELECT k, h::jsonb FROM "
                "unnest($1::text[], $2::text[]) AS t(k, h)",
                list(pending),
                [msgspec.json.encode(h).decode() for h in pending.values()],
            )


async def _store_jobs(conn: asyncpg.Connection, jobs: dict[str, tuple[str, str]]) -> None:
    if jobs:
        await conn.execute(
            'INSERT INTO usage_ledger_jobs (job_id, lab, "user") SELECT * FROM '
            "unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT (job_id) DO NOTHING",
            list(jobs),
            [lab for lab, _ in jobs.values()],
            [user for _, user in jobs.values()],
        )


async def _store_lines(conn: asyncpg.Connection, lines: list[ChargeLine]) -> None:
    if not lines:
        return
    await conn.execute(
        _INSERT_LINES,
        [x.seq for x in lines],
        [x.charge_id for x in lines],
        [x.lab for x in lines],
        [x.reason for x in lines],
        [x.kind for x in lines],
        [x.job_id for x in lines],
        [x.attempt for x in lines],
        [x.user for x in lines],
        [x.at for x in lines],
        [x.amount for x in lines],
        [msgspec.json.encode(x.held).decode() for x in lines],
        [x.value_after for x in lines],
    )


async def read_ledger(
    pool: asyncpg.Pool,
    *,
    lab: str | None = None,
    since: float | None = None,
    until: float | None = None,
) -> Ledger:
    """A `Ledger` of the stored lines (one lab's, or every lab's in [since, until)), with every
    lab's stored usage (`lab_usage`, F3) as its `last` — both read in one snapshot, so the lines
    add up to the usage beside them (F5)."""
    where: list[str] = []
    args: list[object] = []
    for cond, value in (("lab = ", lab), ("at >= ", since), ("at < ", until)):
        if value is not None:
            args.append(value)
            where.append(f"{cond}${len(args)}")
    sql = f"SELECT {_COLUMNS.replace('held', 'held::text AS held')} FROM usage_ledger"
    if where:
        sql += " WHERE " + " AND ".join(where)
    book = Ledger()
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        for r in await conn.fetch(sql + " ORDER BY seq", *args):
            fields = dict(r.items())
            fields["held"] = _held.decode(fields["held"])
            book.lines.append(ChargeLine(**fields))
        for r in await conn.fetch("SELECT lab, value, as_of, updated_seq FROM lab_usage"):
            book.last[r["lab"]] = LabUsage(r["value"], r["as_of"])
            book.seq = max(book.seq, r["updated_seq"])
    return book


projection = UsageLedgerProjection()
