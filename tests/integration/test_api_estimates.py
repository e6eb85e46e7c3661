"""SPEC U4 through the real dispatcher and gateway (real NATS JetStream, PostgreSQL): the leading
dispatcher's forward estimate is published to `jpu_views` and shown by `GET /v1/queue` and
`GET /v1/jobs/{id}`, with its basis and the time it was computed for."""

from __future__ import annotations

import asyncio

import msgspec

from jpu.bus.views import ViewStore
from jpu.domain.cluster import ClusterState, evolve
from jpu.estimate import estimate
from jpu.events import JobPromoted, JobSubmitted
from jpu.store.projection import wait_applied
from jpu.testing.api import Api, bearer
from jpu.testing.fold import Watcher
from jpu_services.dispatcher.service import run_dispatcher

HOUR = 3600.0


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
    config = msgspec.structs.replace(api.config, estimate_every_s=0.5)
    stop = asyncio.Event()
    task = asyncio.create_task(run_dispatcher(api.bus, config, api.clock, stop))
    try:
        async with Watcher(api.bus, api.config) as w:
            t = api.clock.now()
            for i in range(8):  # every GPU busy; the first limit ends in an hour
                await _job(api, f"busy{i}", "OSL", "osl-erin", 1, t, (i + 1) * 3600)
            await w.until(lambda s: all(s.jobs[f"busy{i}"].placement for i in range(8)))
            await _job(api, "wait1", "BCG", "bcg-alice", 1, t + 1, None)
            await _job(api, "wait2", "KDG", "kdg-carol", 2, t + 2, 1800)
            deadline = asyncio.get_running_loop().time() + 20
            while True:
                view = await ViewStore(api.bus).estimates()
                if view is not None and {"wait1", "wait2"} <= set(view.jobs):
                    break
                assert asyncio.get_running_loop().time() < deadline, view
                await asyncio.sleep(0.05)
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
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)
