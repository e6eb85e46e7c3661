"""What a job's page and its history row add to the job body (SPEC §8, X6–X8, U5).

* `elapsed_s`: the latest attempt's run time, from its start (live while it runs, by the
  gateway's clock) to its end;
* on the job page, `attempts` (each attempt: tier, node, state, exit code, reason, OOM verdict,
  GPU-seconds, its output directory), `oom_explanation` (one sentence per attempt that ran out
  of memory, `jpu.domain.attempts`), `min_vram_gb_requested` (what the user asked; `min_vram_gb`
  is raised by an OOM retry, X8) and `max_attempts`;
* in lists, `gpu_seconds` over every attempt.

The jobs projection keeps the latest attempt only, so a job with an earlier attempt or an OOM
verdict is read from its own subject of the log (one short read per such job); any other job is
its row.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec
import nats.errors

from jpu.backends import joblogs
from jpu.domain import attempts
from jpu.domain.states import job_view
from jpu.events import Delivered, JobSubmitted
from jpu.runtime.edges import Edges
from jpu_services.gateway.config import GatewayConfig

_LOG_ERRORS: Final = (nats.errors.Error, TimeoutError, OSError)
_CONCURRENT_READS: Final = 8  # subjects a history page of retried jobs reads at once


def needs_events(row: Mapping[str, Any]) -> bool:
    """More than the row knows: an earlier attempt, or an OOM verdict to explain (X8)."""
    return bool(row["attempt"] > 1 or row["oom"])


async def job_events(edges: Edges, job_id: str) -> list[Delivered] | None:
    """The job's events from the log; None if the log is unreachable (the page still shows
    what the projection holds)."""
    try:
        return await edges.bus.job_events(job_id)
    except _LOG_ERRORS:
        return None


def story(delivered: list[Delivered]) -> list[attempts.Attempt]:
    """The attempts the job's events tell (as GET /v1/jobs/{id}/events shows them); whether an
    undecided OOM retry is still open is the job fold's answer (X8, `JobView.oom_pending`)."""
    view = job_view(delivered)
    shown = [{"seq": d.seq, **msgspec.to_builtins(d.event)} for d in delivered]
    return attempts.attempts(shown, oom_pending=view is not None and view.oom_pending)


def elapsed_s(out: Mapping[str, Any], now: float) -> float | None:
    started = out.get("started_at")
    if started is None:
        return None
    return max(0.0, (out.get("ended_at") or now) - started)


async def job_page(
    out: dict[str, Any], row: Mapping[str, Any], edges: Edges, settings: GatewayConfig, now: float
) -> dict[str, Any]:
    """`out` (the job body) with its attempts and their story."""
    events = await job_events(edges, row["job_id"]) if needs_events(row) else None
    items = story(events) if events else [attempts.from_row(row)]
    requested = row["min_vram_gb"] if row["attempt"] == 1 else None
    if events and isinstance(events[0].event, JobSubmitted):
        requested = events[0].event.min_vram_gb
    vram = {t.name: t.vram_gb for t in settings.base.tiers}
    max_attempts = settings.base.max_attempts
    return {
        **out,
        "elapsed_s": elapsed_s(out, now),
        "attempts": [_attempt_out(a, out["id"], vram, settings) for a in items],
        "attempts_complete": events is not None or not needs_events(row),
        "oom_explanation": attempts.explain(items, vram, max_attempts),
        "min_vram_gb_requested": requested,
        "max_attempts": max_attempts,
    }


def _attempt_out(
    a: attempts.Attempt, job_id: str, vram: Mapping[str, int], settings: GatewayConfig
) -> dict[str, Any]:
    return {
        **a.as_dict(),
        "vram_gb": vram.get(a.tier or ""),
        "run_s": None if a.started_at is None or a.ended_at is None else a.ended_at - a.started_at,
        "output_dir": str(joblogs.attempt_dir(settings.output_root, job_id, a.attempt)),
    }


async def history_rows(
    outs: Sequence[dict[str, Any]], rows: Sequence[Mapping[str, Any]], edges: Edges, now: float
) -> list[dict[str, Any]]:
    """List entries with `elapsed_s` and `gpu_seconds` (every attempt's, F5)."""
    gate = asyncio.Semaphore(_CONCURRENT_READS)

    async def one(out: dict[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
        events = None
        if row["attempt"] > 1:  # the row lost the earlier attempts
            async with gate:
                events = await job_events(edges, row["job_id"])
        items = story(events) if events else [attempts.from_row(row)]
        return {
            **out,
            "elapsed_s": elapsed_s(out, now),
            "gpu_seconds": attempts.gpu_seconds(items, row["num_gpus"], now),
        }

    return list(await asyncio.gather(*(one(o, r) for o, r in zip(outs, rows, strict=True))))
