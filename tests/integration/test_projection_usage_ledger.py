"""SPEC F5 on PostgreSQL: the `usage_ledger` projection stores exactly the lines of the
pure ledger (jpu.explain.usage) of the same log, however the log is cut into batches, so
explain-usage and the statement read an index and still add up to the lab's usage (F5).

Logs: the simulator's mixed workloads of the differential test (reservations with swap and R3
demotion, OOM retries, cancellations in every state) and the fixtures' sample log."""

from __future__ import annotations

import random

import asyncpg
import msgspec
import pytest

from jpu.bus.model import Delivered
from jpu.events import subject_for
from jpu.explain.usage import explain_usage, ledger, usage_statement
from jpu.store import apply_batch
from jpu.store.projection import apply_to_all
from jpu.store.projections import lab_usage, usage_ledger
from jpu.store.projections.usage_ledger import read_ledger
from jpu.testing.pg_fixtures import sample_log
from jpu.testing.workloads import SEEDS, seeded_params, seeded_run

SAMPLE_HALF_LIFE = 7 * 24 * 3600.0  # jpu.testing.pg_fixtures.sample_log's


def _log(n_jobs: int) -> list[Delivered]:
    return [Delivered(i + 1, subject_for(e), e, {}) for i, e in enumerate(sample_log(n_jobs))]


def _lines(book) -> list[dict]:
    return [msgspec.to_builtins(x) for x in book.lines]


def test_the_simulated_logs_charge_reservations_both_ways() -> None:
    """What the next test covers: R3 charges at release and R4 reservation time with the run."""
    lines = [x for seed in SEEDS for x in ledger(seeded_run(seed)[0]).lines]
    assert any(x.kind == "reservation" and x.reason == "demoted" for x in lines)  # R3
    assert any(h.what == "reservation" for x in lines if x.kind == "run" for h in x.held)  # R4


CUTS = ["one_by_one", "random_batches", "whole_log"]


@pytest.mark.parametrize(
    ("seed", "cut"), [(s, CUTS[s % 3]) for s in SEEDS] + [(-1, "random_batches")]
)
async def test_F5_usage_ledger_projection_is_the_pure_ledger_of_the_log(
    pool: asyncpg.Pool, seed: int, cut: str
) -> None:
    log = seeded_run(seed)[0] if seed >= 0 else _log(40)
    half_life = seeded_params(seed).half_life_s if seed >= 0 else SAMPLE_HALF_LIFE  # accounting's
    pure = ledger(log)
    assert pure.lines

    rng = random.Random(seed)
    at = 0
    while at < len(log):  # a transaction per batch, as the live projector commits
        n = {"one_by_one": 1, "whole_log": len(log)}.get(cut) or rng.randint(1, 60)
        await apply_to_all(pool, (lab_usage.projection, usage_ledger.projection), log[at : at + n])
        at += n
    stored = await read_ledger(pool)
    assert _lines(stored) == _lines(pure)
    assert stored.last == pure.last
    # nothing is left carried but what the log still owes (reservation time of queued jobs)
    pending = await pool.fetchval("SELECT count(*) FROM usage_ledger_pending")
    assert pending == len(pure.lazy) + len(pure.sources)

    now = log[-1].event.ts + 3600.0
    for lab in sorted(pure.last):
        x = explain_usage(await read_ledger(pool, lab=lab), lab, now, half_life)
        assert msgspec.to_builtins(x) == msgspec.to_builtins(
            explain_usage(pure, lab, now, half_life)
        )
        assert x.total_value == pytest.approx(x.usage, rel=1e-9)  # F5: the lines add up
    mid = log[len(log) // 2].event.ts
    part = await read_ledger(pool, since=mid)
    assert msgspec.to_builtins(usage_statement(part, since=mid)) == msgspec.to_builtins(
        usage_statement(pure, since=mid)
    )


async def test_E3_usage_ledger_applies_each_event_once(pool: asyncpg.Pool) -> None:
    log = _log(10)
    assert await apply_batch(pool, usage_ledger.projection, log) == len(log)
    assert await apply_batch(pool, usage_ledger.projection, log) == 0  # a redelivery: no-op
    assert _lines(await read_ledger(pool)) == _lines(ledger(log))
