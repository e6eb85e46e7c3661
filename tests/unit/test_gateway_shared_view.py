"""The gateway's single-flight queue view (jpu_services.gateway.routes._queueview.SharedView):
requests waiting together share one computation, and none gets a view read before it asked
(SPEC D1 rank in the submit answer stays read-your-writes)."""

from __future__ import annotations

import asyncio

import pytest

from jpu_services.gateway.routes._queueview import QueuePage, SharedView


def counting_view() -> tuple[SharedView, list[int]]:
    started: list[int] = []

    async def compute() -> QueuePage:
        started.append(len(started) + 1)
        n = len(started)
        await asyncio.sleep(0.02)
        return QueuePage(now=float(n), maintenance="off", ordered=[], personal=[], usage={})

    return SharedView(compute), started


async def test_D1_concurrent_requests_share_one_computation() -> None:
    view, started = counting_view()
    results = await asyncio.gather(*(view.get() for _ in range(20)))
    assert len(started) == 1
    assert {r.now for r in results} == {1.0}


async def test_D1_a_request_after_a_computation_started_gets_a_later_one() -> None:
    view, started = counting_view()
    first = asyncio.create_task(view.get())
    await asyncio.sleep(0.005)  # the first computation is running now
    late = await asyncio.gather(*(view.get() for _ in range(5)))
    assert (await first).now == 1.0
    assert {r.now for r in late} == {2.0} and len(started) == 2


async def test_D1_a_failed_computation_fails_its_waiters_only() -> None:
    calls = 0

    async def compute() -> QueuePage:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database went away")
        return QueuePage(now=2.0, maintenance="off", ordered=[], personal=[], usage={})

    view = SharedView(compute)
    with pytest.raises(RuntimeError):
        await view.get()
    assert (await view.get()).now == 2.0


def test_D1_rank_of_ranks_the_global_queue_only() -> None:
    view = QueuePage(
        now=0.0,
        maintenance="off",
        ordered=[{"job_id": "a"}, {"job_id": "b"}, {"job_id": "new"}],
        personal=[{"job_id": "p"}],
        usage={},
        reasons={"b": "Resources"},
        ranked=2,  # the dispatcher's last cycle ranked a and b; "new" came after it
        decided_at=0.0,
    )
    assert view.rank_of("a") == (1, None)
    assert view.rank_of("b") == (2, "Resources")
    assert view.rank_of("new") == (None, None)  # D7: the next cycle decides
    # D7 in the personal queue is the domain's, on the gateway's fold (gateway.personal)
    assert view.rank_of("p") == (None, None)
    assert view.rank_of("zzz") == (None, None)
