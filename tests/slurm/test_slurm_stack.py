"""The whole stack on the real Slurm test cluster (SPEC §5, §6, E4): real NATS JetStream and
PostgreSQL, the gateway app over ASGI, intake, dispatcher, accounting, the slurm-agent and the
backfill service, both on `slurm_backend: slurm` (make_backend, as `python -m jpu.stack run`
builds them). Backfill first fills every idle GPU in the `llm` partition; a job submitted over
HTTP then preempts one, runs as a Slurm job, ends COMPLETED and is charged (B2, B5, X2)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from typing import Any

import asyncpg
import httpx

from jpu.backends import joblogs
from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobEnded,
    JobStarted,
    JobSubmitted,
    UsageCharged,
)
from jpu.testing.slurm_fixtures import SlurmCluster
from jpu.testing.slurm_stack import CAROL, N4090, slurm_stack


def _preempted_twice(events: list[Any]) -> bool:
    ends = [e for e in events if isinstance(e, JobEnded)]
    return (
        bool(ends)
        and sum(isinstance(e, BackfillEnded) and e.node == ends[0].node for e in events) >= 2
    )


async def test_B2_X2_job_submitted_over_http_runs_on_slurm_over_backfill_and_is_charged(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, slurm_cluster: SlurmCluster
) -> None:
    async with slurm_stack(nats_url, pool, pg_dsn, slurm_cluster) as s:
        c, w = s.client, s.watcher
        await w.until(lambda st: all(g in st.backfill for g in N4090), timeout=30)
        body = {"name": "t", "command": 'echo "cvd=$CUDA_VISIBLE_DEVICES att=$JOB_ATTEMPT"',
                "num_gpus": 2, "tiers": ["rtx4090"]}  # fmt: skip
        r = await c.post("/v1/jobs", json=body, headers=CAROL)
        assert r.status_code == 201, r.text
        job = str(r.json()["id"])
        await w.until(lambda st: st.jobs[job].state == "COMPLETED", timeout=30)
        await w.until(lambda st: "KDG" in st.usage, timeout=10)
        events = await s.events_until(_preempted_twice, timeout=15)
        (started,) = [e for e in events if isinstance(e, JobStarted)]
        (end,) = [e for e in events if isinstance(e, JobEnded)]
        (charge,) = [e for e in events if isinstance(e, UsageCharged)]
        assert started.backend_job_id.isdigit()  # a Slurm job id
        assert end.state == "COMPLETED" and charge.lab == "KDG" and charge.job_id == job
        assert abs(charge.amount - end.usage) < 1e-9 and charge.amount > 0
        stdout = (joblogs.attempt_dir(joblogs.output_root(s.config), job, 1) / "stdout").read_text()
        assert "cvd=0,1 att=1" in stdout, stdout  # X2, on the Slurm node's GPUs
        # B2: the backfill on the job's node ended (preempted), and was never charged (B5)
        bf_started = [e for e in events if isinstance(e, BackfillStarted)]
        ended = [e for e in events if isinstance(e, BackfillEnded) and e.node == end.node]
        assert len(ended) == 2 and {e.reason for e in ended} == {"preempted"}, ended
        assert all(e.endpoint for e in bf_started if e.node != "gpu-3080tix2-01")
        # the API's view is a projection of the same log: it reaches the end too (E3)
        v = await _poll(lambda: _view(c, job), lambda v: v["state"] == "COMPLETED", 15)
        assert v["state"] == "COMPLETED", v


async def _submit(c: httpx.AsyncClient, body: dict[str, Any]) -> str:
    r = await c.post("/v1/jobs", json={"name": "t", **body}, headers=CAROL)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


OOM_SCRIPT = (
    'if [ "$JOB_ATTEMPT" = 1 ]; then echo "CUDA out of memory"; exit 1; fi; '
    'echo "JOB_ATTEMPT=$JOB_ATTEMPT"'
)


async def test_X8_oom_on_slurm_rtx3080ti_retries_on_rtx4090_with_job_attempt_2(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, slurm_cluster: SlurmCluster
) -> None:
    async with slurm_stack(nats_url, pool, pg_dsn, slurm_cluster) as s:
        c, w, bus = s.client, s.watcher, s.bus
        # The 4 rtx4090 GPUs are held by two jobs, so attempt 1 can only land on the 3080 Ti.
        blockers = [await _submit(c, {"command": "sleep 6", "num_gpus": 2, "tiers": ["rtx4090"]})
                    for _ in range(2)]  # fmt: skip
        await w.until(lambda st: all(st.jobs[b].state == "RUNNING" for b in blockers), timeout=30)
        body = {"command": OOM_SCRIPT, "num_gpus": 1, "tiers": ["rtx3080ti", "rtx4090"]}
        job = await _submit(c, body)
        await w.until(lambda st: st.jobs[job].state == "COMPLETED", timeout=45)
        events = [d.event async for d in bus.replay() if getattr(d.event, "job_id", None) == job]
        ends = sorted((e for e in events if isinstance(e, JobEnded)), key=lambda e: e.attempt)
        assert [(e.attempt, e.state, e.tier) for e in ends] == [
            (1, "FAILED", "rtx3080ti"),
            (2, "COMPLETED", "rtx4090"),
        ], ends
        assert sum(isinstance(e, JobSubmitted) for e in events) == 1  # the user never resubmits
        stdout = (joblogs.attempt_dir(joblogs.output_root(s.config), job, 2) / "stdout").read_text()
        assert "JOB_ATTEMPT=2" in stdout, stdout


def _scontrol(cluster: SlurmCluster, state: str, check: bool = True) -> None:
    env = {**os.environ, "SLURM_CONF": cluster.conf}
    cmd = ["scontrol", "update", "nodename=gpu-3080tix2-01", f"state={state}"]
    subprocess.run(cmd + (["reason=test"] if state == "drain" else []), env=env, check=check)


async def _placement(c: httpx.AsyncClient, node: str) -> dict[str, Any]:
    r = await c.get("/v1/placements", headers=CAROL)
    assert r.status_code == 200, r.text
    rows = [p for p in r.json()["placements"] if p["node"] == node]
    return dict(rows[0]) if rows else {}


async def _view(c: httpx.AsyncClient, job: str) -> dict[str, Any]:
    r = await c.get(f"/v1/jobs/{job}", headers=CAROL)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _poll(fetch: Any, pred: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await fetch()
        if pred(got) or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.3)


async def test_P2_drained_node_leaves_placements_and_job_waits_for_resources(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, slurm_cluster: SlurmCluster
) -> None:
    node, tier = "gpu-3080tix2-01", "rtx3080ti"
    async with slurm_stack(nats_url, pool, pg_dsn, slurm_cluster) as s:
        c, w = s.client, s.watcher
        try:
            # Q2 rejects a job no placement can ever run, so the job is accepted while a blocker
            # holds both GPUs, the node is drained under it, then the blocker is cancelled
            # once the drain shows.
            blocker = await _submit(c, {"command": "sleep 60", "num_gpus": 2, "tiers": [tier]})
            await w.until(lambda st: st.jobs[blocker].state == "RUNNING", timeout=30)
            job = await _submit(c, {"command": "echo ok", "num_gpus": 1, "tiers": [tier]})
            _scontrol(slurm_cluster, "drain")
            p = await _poll(lambda: _placement(c, node), lambda p: p.get("capacity") == 0, 20)
            assert p["capacity"] == 0 and p["down"] == 2, p  # P2: down GPUs are no capacity
            # only then free the blocker's GPUs: the job must not get them (P2)
            r = await c.post(f"/v1/jobs/{blocker}/cancel", headers=CAROL)
            assert r.status_code == 202, r.text
            await w.until(lambda st: st.jobs[blocker].state == "CANCELLED", timeout=20)
            r = await c.post("/v1/jobs", json={"command": "true", "num_gpus": 1, "tiers": [tier]},
                             headers=CAROL)  # fmt: skip
            assert r.status_code == 422 and "NO_FIT_PLACEMENT" in r.text, r.text  # Q2
            v = await _poll(
                lambda: _view(c, job), lambda v: v.get("pending_reason") == "Resources", 10
            )
            assert v["state"] == "GLOBAL_QUEUE_WAIT" and v["pending_reason"] == "Resources", v
            # the dispatcher cycled twice more on the freed, drained GPUs: still waiting, never
            # started (a positive signal, not a pause)
            after = s.dispatcher_stats.cycles
            await w.until(lambda st: s.dispatcher_stats.cycles >= after + 2, timeout=20)
            v = await _view(c, job)
            assert v["state"] == "GLOBAL_QUEUE_WAIT" and v["pending_reason"] == "Resources", v
            _scontrol(slurm_cluster, "resume")
            await w.until(lambda st: st.jobs[job].state == "COMPLETED", timeout=30)
        finally:
            _scontrol(slurm_cluster, "resume", check=False)  # never leave the node drained
