"""SPEC U4 through the real dispatcher and gateway (real NATS JetStream, PostgreSQL): the leading
dispatcher's forward estimate is published to `jpu_views` and shown by `GET /v1/queue` and
`GET /v1/jobs/{id}`, with its basis and the time it was computed for."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec

from jpu import commands
from jpu.bus.views import ViewStore
from jpu.config import Config
from jpu.domain.cluster import ClusterState, evolve
from jpu.events import JobEnded, JobPromoted, JobSubmitted
from jpu.explain.estimate import estimate
from jpu.store.projection import wait_applied
from jpu.testing.api import Api, bearer, job_body
from jpu.testing.fold import Watcher
from jpu_services.dispatcher.service import run_dispatcher

HOUR = 3600.0


@contextlib.asynccontextmanager
async def _dispatching(api: Api) -> AsyncIterator[tuple[Config, Watcher]]:
    """The real leading dispatcher estimating every 0.5 s, and a fold of the log to wait on."""
    config = msgspec.structs.replace(api.config, estimate_every_s=0.5)
    stop = asyncio.Event()
    task = asyncio.create_task(run_dispatcher(api.bus, config, api.clock, stop))
    try:
        async with Watcher(api.bus, api.config) as w:
            yield config, w
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def _job(
    api: Api, job_id: str, lab: str, user: str, n: int, entered: float, limit: int | None
) -> None:
    await api.append(
        JobSubmitted(
            **api.kw(),
            job_id=job_id,
            lab=lab,
            user=user,
            name=job_id,
            command="true",
            num_gpus=n,
            time_limit_s=limit,
        ),
        JobPromoted(**api.kw(), job_id=job_id, queue_entered_at=entered),
    )


async def test_U4_queue_and_job_show_the_dispatchers_estimated_start(api: Api) -> None:
    async with _dispatching(api) as (config, w):
        t = api.clock.now()
        for i in range(8):  # every GPU busy; the first limit ends in an hour
            await _job(api, f"busy{i}", "OSL", "osl-erin", 1, t, (i + 1) * 3600)
        await w.until(lambda s: all(s.jobs[f"busy{i}"].placement for i in range(8)))
        await _job(api, "wait1", "BCG", "bcg-alice", 1, t + 1, None)
        await _job(api, "wait2", "KDG", "kdg-carol", 2, t + 2, 1800)
        view = await _estimated(api, {"wait1", "wait2"}, t)
        await wait_applied(api.pool, "jobs", await api.bus.last_seq(), timeout=15)
        # exactly: the first GPU frees when busy0's limit ends (dispatched at t)
        assert view.at == t
        assert view.jobs["wait1"] == (t + HOUR, "limits")
        # the rest as the pure estimate gives it on the same log
        state = ClusterState.new(api.config)
        async for d in api.bus.replay():
            evolve(state, d)
        assert state.seq >= view.seq
        pure = estimate(state, config, view.at).estimates["wait2"]
        assert view.jobs["wait2"] == (pure.start, pure.basis)
        assert pure.start is not None and pure.start > t + HOUR
        for job_id in ("wait1", "wait2"):
            body = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("admin"))).json()
            start, basis = view.jobs[job_id]
            assert body["estimated_start"] == start, body
            assert body["estimate_basis"] == basis
            assert body["estimated_at"] == view.at
        q = (await api.client.get("/v1/queue", headers=bearer("carol"))).json()
        by_id = {e["job_id"]: e for e in q["queue"]}
        assert by_id["wait1"]["estimated_start"] == t + HOUR
        assert by_id["wait1"]["estimate_basis"] == "limits"
        assert by_id["wait2"]["estimated_at"] == view.at
        done = (await api.client.get("/v1/jobs/busy0", headers=bearer("admin"))).json()
        assert done["estimated_start"] is None and done["estimate_basis"] is None  # running


async def _estimated(api: Api, jobs: set[str], after: float) -> commands.EstimatesView:
    """The dispatcher's first published estimate covering `jobs`, computed at `after` or later."""
    deadline = asyncio.get_running_loop().time() + 20
    while True:
        view = await ViewStore(api.bus).estimates()
        if view is not None and jobs <= set(view.jobs) and view.at >= after:
            return view
        assert asyncio.get_running_loop().time() < deadline, view
        await asyncio.sleep(0.05)


async def test_U4_full_cluster_overrun_estimate_is_the_first_limit_end_not_now(api: Api) -> None:
    """Every GPU busy (0 idle, Resources) with jobs of 2 h limits whose user's runs end at half
    of them: 90 min in, every job is past its predicted end. The estimate was "now" (the moment
    it was computed, moving forward with each recomputation); it is when the first limit ends."""
    async with _dispatching(api) as (_, w):
        t = api.clock.now()
        for i in range(3):  # osl-erin's history: 1 h runs under 2 h limits (ratio 0.5)
            await _job(api, f"h{i}", "OSL", "osl-erin", 1, t, 2 * 3600)
        await w.until(lambda s: all(s.jobs[f"h{i}"].placement for i in range(3)))
        for i in range(3):
            node, tier, gpus = w.state.jobs[f"h{i}"].placement or ("", "", ())
            await api.append(
                JobEnded(
                    **api.kw(), job_id=f"h{i}", attempt=1, state="COMPLETED", node=node,
                    tier=tier, gpus=list(gpus), gpu_seconds_run=HOUR, tflops=82.6,
                )
            )  # fmt: skip
        await w.until(lambda s: all(s.jobs[f"h{i}"].state == "COMPLETED" for i in range(3)))
        for i in range(8):
            await _job(api, f"busy{i}", "OSL", "osl-erin", 1, t, 2 * 3600)
        await w.until(lambda s: all(s.jobs[f"busy{i}"].placement for i in range(8)))
        api.clock.advance(1.5 * HOUR)  # past every predicted end (1 h), before the limits
        now = api.clock.now()
        await _job(api, "wait1", "BCG", "bcg-alice", 1, now, 3600)
        view = await _estimated(api, {"wait1"}, now)
        assert view.jobs["wait1"] == (t + 2 * HOUR, "limits"), (view, now)
        await wait_applied(api.pool, "jobs", await api.bus.last_seq(), timeout=15)
        body = (await api.client.get("/v1/jobs/wait1", headers=bearer("alice"))).json()
        assert body["estimated_start"] == t + 2 * HOUR, body
        assert body["estimate_reason"] is None


async def test_U4_unknown_estimate_says_why_in_the_api(api: Api) -> None:
    """Every GPU held by jobs with no time limit and no recorded runs: the start is unknown, and
    the job and the queue say why (the jobs holding the GPUs), not a bare "unknown"."""
    async with _dispatching(api) as (_, w):
        t = api.clock.now()
        for i in range(8):
            await _job(api, f"busy{i}", "OSL", "osl-erin", 1, t, None)
        await w.until(lambda s: all(s.jobs[f"busy{i}"].placement for i in range(8)))
        await _job(api, "wait1", "BCG", "bcg-alice", 1, t + 1, 3600)
        view = await _estimated(api, {"wait1"}, t)
        assert view.jobs["wait1"] == (None, "unknown")
        await wait_applied(api.pool, "jobs", await api.bus.last_seq(), timeout=15)
        body = (await api.client.get("/v1/jobs/wait1", headers=bearer("alice"))).json()
        assert body["estimated_start"] is None and body["estimate_basis"] == "unknown"
        why = body["estimate_reason"]
        assert "held by busy0" in why and "no time limit" in why, body
        q = (await api.client.get("/v1/queue", headers=bearer("carol"))).json()
        (entry,) = [e for e in q["queue"] if e["job_id"] == "wait1"]
        assert entry["estimate_reason"] == why


async def test_U4_an_estimate_is_never_served_in_the_past(api: Api) -> None:
    """Between two estimates "now" moves on: a start the last estimate put a few seconds ago is
    served as now (the answer's time), by the job's body and the queue alike."""
    r = await api.submit("alice", job_body())
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    t = api.clock.now()
    view = commands.EstimatesView(at=t - 10, seq=0, jobs={job_id: (t - 6, "limits")})
    await ViewStore(api.bus).put_estimates(view)
    api.clock.advance(2)  # and the next request a little later still
    now = api.clock.now()
    body = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("alice"))).json()
    assert body["estimated_start"] == now and body["estimated_at"] == t - 10, body
    q = (await api.client.get("/v1/queue", headers=bearer("alice"))).json()
    entry = next(e for e in [*q["queue"]] if e["job_id"] == job_id)
    assert entry["estimated_start"] >= now and entry["estimate_basis"] == "limits", entry
    # a start still ahead is served as the estimate gave it
    later = commands.EstimatesView(at=now, seq=0, jobs={job_id: (now + HOUR, "limits")})
    await ViewStore(api.bus).put_estimates(later)
    body = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("alice"))).json()
    assert body["estimated_start"] == now + HOUR, body
