"""The full maintenance cycle on the real Slurm test cluster (SPEC M1–M5, D6, D7, R5, Q3).

Backfill fills the idle rtx4090 GPUs with `llm`-partition Slurm jobs; two user jobs run on Slurm
(2 GPUs on one node, 1 on the other), a 2-GPU job is rank 1 and reserves the last idle GPU (R1;
backfill keeps running under it, R2) and two 1-GPU jobs wait behind it. An admin starts
maintenance; one running job finishes, the other is cancelled mid-drain (CANCELLING keeps
DRAINING), backfill is reclaimed, and after the admin ends it the waiting jobs dispatch in
fair-share order. Slurm itself (`squeue --json`) is checked where it matters, and the anonymous
status endpoint is watched throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg

from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    MaintenanceChanged,
    ReservationReleased,
    ReservationStarted,
    UsageCharged,
)
from jpu.testing.api import bearer
from jpu.testing.slurm_fixtures import SlurmCluster
from jpu.testing.slurm_stack import N4090, SlurmStack, active_slurm_jobs, slurm_stack
from jpu.testing.stack import backfill_rounds

RTX4090 = ["rtx4090"]


@dataclass
class StatusLog:
    """Every maintenance state seen by an anonymous client, with M5's GETs in that state."""

    seen: list[dict[str, Any]] = field(default_factory=list)
    gets: dict[str, list[int]] = field(default_factory=dict)

    @property
    def states(self) -> list[str]:
        return [s["state"] for s in self.seen]


async def _watch_status(s: SlurmStack, log: StatusLog, job: str, stop: asyncio.Event) -> None:
    while not stop.is_set():
        r = await s.client.get("/v1/maintenance/status")  # no Authorization header (M5)
        assert r.status_code == 200, r.text
        body = dict(r.json())
        if not log.seen or log.seen[-1]["state"] != body["state"]:
            log.seen.append(body)
            paths = ("/v1/queue", f"/v1/jobs/{job}", "/v1/placements")
            got = [await s.client.get(p, headers=bearer("kdg-carol")) for p in paths]
            log.gets[body["state"]] = [r.status_code for r in got]
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def _status_log(s: SlurmStack, job: str) -> AsyncIterator[StatusLog]:
    log, stop = StatusLog(), asyncio.Event()
    task = asyncio.create_task(_watch_status(s, log, job, stop))
    try:
        yield log
    finally:
        stop.set()
        await task


async def _maintenance(s: SlurmStack, action: str, message: str) -> dict[str, Any]:
    body = {"action": action, "message": message}
    r = await s.client.post("/v1/admin/maintenance", json=body, headers=bearer("admin"))
    assert r.status_code == 200, r.text
    return dict(r.json())


async def _submit_refused(s: SlurmStack) -> None:
    body = {"name": "late", "command": "true", "num_gpus": 1}
    r = await s.client.post("/v1/jobs", json=body, headers=bearer("osl-erin"))
    assert r.status_code == 503 and r.json()["error"]["code"] == "SERVICE_MAINTENANCE", r.text


@dataclass(frozen=True)
class Jobs:
    finishes: str  # RUNNING on Slurm when maintenance starts; must end normally (M1)
    cancelled: str  # RUNNING, cancelled during the drain: CANCELLING keeps DRAINING (M2)
    queued: str  # rank 1, reserving (R1), then waits out the maintenance
    jumped: str  # another lab's waiting job that outranks `queued` once KDG is charged (M4)
    doomed: str  # waiting; its cancellation is accepted during the drain (M1)


async def _setup(s: SlurmStack) -> Jobs:
    """Backfill everywhere, two running Slurm jobs, a reservation, two waiting jobs."""
    await s.until(lambda st: all(g in st.backfill for g in N4090), timeout=30)  # B1
    running = []
    for user, num_gpus, command in (
        ("bcg-alice", 2, "sleep 9"),
        ("bcg-bob", 1, TRAPS_TERM),
    ):  # one per rtx4090 node (D4)
        body = {"command": command, "num_gpus": num_gpus, "tiers": RTX4090}
        running.append(job := await s.submit(user, body))
        await s.until(lambda st, job=job: st.jobs[job].state == "RUNNING")
    # rank 1, 2 GPUs, only one idle (backfilled) GPU left: it reserves (R1, D3.c)
    queued = await s.submit("kdg-carol", {"command": "sleep 1", "num_gpus": 2, "tiers": RTX4090})
    await s.until(lambda st: st.jobs[queued].state == "RESERVING")
    waiting = [
        await s.submit(user, {"command": "sleep 1", "num_gpus": 1, "tiers": RTX4090})
        for user in ("osl-erin", "bcg-alice")
    ]
    await s.watcher.ranked(waiting)  # a cycle decided on them: behind the reservation (D5)
    assert all(s.state.jobs[j].state == "GLOBAL_QUEUE_WAIT" for j in waiting)
    return Jobs(running[0], running[1], queued, *waiting)


# Outlives the drain until cancelled, then takes 1.5 s to checkpoint (within the 2 s grace, X5).
TRAPS_TERM = "trap 'sleep 1.5; exit 0' TERM; sleep 60 & wait"


async def test_M1_to_M5_full_maintenance_cycle_on_slurm_with_running_jobs_and_backfill(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, slurm_cluster: SlurmCluster
) -> None:
    async with slurm_stack(nats_url, pool, pg_dsn, slurm_cluster) as s:
        jobs = await _setup(s)
        (res,) = [e for e in await s.events(ReservationStarted) if e.job_id == jobs.queued]
        kept = s.state.backfill[(res.node, res.tier, res.gpus[0])]  # R2: backfill under it
        (kept_slurm,) = [
            e.backend_job_id for e in await s.events(BackfillStarted) if e.backfill_id == kept
        ]
        assert active_slurm_jobs(slurm_cluster, "llm")[kept_slurm] == "RUNNING"

        async with _status_log(s, jobs.queued) as log:
            await _draining(s, jobs, kept, kept_slurm)
            await _recovery_then_active(s, jobs, kept)
            await _normal(s, jobs)
        assert log.states == ["NORMAL", "DRAINING", "BACKFILL_RECOVERY", "ACTIVE", "NORMAL"], log
        assert log.seen[1]["message"] == "NFS volume swap" and log.seen[-1]["message"] == "done"
        assert all(codes == [200, 200, 200] for codes in log.gets.values()), log.gets  # M5


async def _draining(s: SlurmStack, jobs: Jobs, kept: str, kept_slurm: str) -> None:
    """M1: 503 on submit, reservation released and charged, backfill and running jobs go on."""
    assert (await _maintenance(s, "start", "NFS volume swap"))["state"] == "DRAINING"
    await _submit_refused(s)  # Q3: 503 SERVICE_MAINTENANCE
    await s.until(lambda st: st.jobs[jobs.queued].state == "GLOBAL_QUEUE_WAIT", timeout=10)
    (rel,) = [e for e in await s.events(ReservationReleased) if e.job_id == jobs.queued]
    assert rel.reason == "maintenance" and rel.charged_now  # R5: charged like R3
    await s.until(lambda st: "KDG" in st.usage, timeout=10)
    charges = [c for c in await s.events(UsageCharged) if c.job_id == jobs.queued]
    assert [c.reason for c in charges] == ["maintenance"] and charges[0].amount > 0, charges
    r = await s.client.post(f"/v1/jobs/{jobs.doomed}/cancel", headers=bearer("bcg-alice"))
    assert r.status_code == 202, r.text  # M1: cancellation is allowed
    await s.until(lambda st: st.jobs[jobs.doomed].state == "CANCELLED", timeout=10)
    assert s.state.jobs[jobs.finishes].state == "RUNNING"
    assert kept in s.state.backfill.values()  # M1: backfill keeps running while draining
    assert active_slurm_jobs(s.cluster, "llm").get(kept_slurm) == "RUNNING"  # on Slurm too

    await s.until(lambda st: st.jobs[jobs.finishes].state == "COMPLETED", timeout=20)
    assert s.state.maintenance.state == "DRAINING"  # a job still runs
    r = await s.client.post(f"/v1/jobs/{jobs.cancelled}/cancel", headers=bearer("bcg-bob"))
    assert r.status_code == 202, r.text
    await s.until(lambda st: st.jobs[jobs.cancelled].state == "CANCELLING", timeout=5)
    await asyncio.sleep(0.5)  # the job checkpoints: still CANCELLING, so still DRAINING (M2)
    assert s.state.jobs[jobs.cancelled].state == "CANCELLING"
    assert s.state.maintenance.state == "DRAINING"


async def _recovery_then_active(s: SlurmStack, jobs: Jobs, kept: str) -> None:
    """M2: once no user job holds GPUs, backfill is reclaimed on Slurm; M3: then ACTIVE."""
    await s.until(lambda st: st.maintenance.state == "ACTIVE", timeout=30)
    events = await s.events(JobEnded, JobCancelRequested, MaintenanceChanged)
    ends = {e.job_id: e.state for e in events if isinstance(e, JobEnded)}
    assert ends[jobs.finishes] == "COMPLETED" and ends[jobs.cancelled] == "CANCELLED", ends
    cancels = {e.job_id for e in events if isinstance(e, JobCancelRequested)}
    assert cancels == {jobs.doomed, jobs.cancelled}  # nobody else cancelled a running job
    kinds = [e.state if isinstance(e, MaintenanceChanged) else e.job_id for e in events]
    assert kinds.index("BACKFILL_RECOVERY") > max(
        i for i, e in enumerate(events) if isinstance(e, JobEnded)
    ), kinds  # recovery only after the last user job ended
    assert not s.state.backfill
    assert active_slurm_jobs(s.cluster, "llm") == {}  # M2: every llm-partition job is gone
    reclaimed = {e.backfill_id for e in await s.events(BackfillEnded) if e.reason == "reclaimed"}
    assert kept in reclaimed
    await _submit_refused(s)  # Q3 in every maintenance state
    # idle GPUs, settled, and later rounds ran: still nothing (a positive signal, not a pause)
    await backfill_rounds(s.backfill_stats, s.watcher, after_s=s.config.backfill_settle_s)
    await _no_backfill_or_dispatch_since_recovery(s, jobs)
    assert active_slurm_jobs(s.cluster, "llm") == {}


async def _normal(s: SlurmStack, jobs: Jobs) -> None:
    """M4: NORMAL; the queued jobs dispatch in fair-share order and complete on Slurm."""
    r = await s.client.get("/v1/queue", headers=bearer("kdg-carol"))
    queue = r.json()["queue"]
    # D1: OSL (no usage) now ranks above KDG (charged for its reservation), queued earlier
    assert [e["job_id"] for e in queue] == [jobs.jumped, jobs.queued], queue
    assert {e["pending_reason"] for e in queue} == {"Maintenance"}, queue  # D7
    assert (await _maintenance(s, "end", "done"))["state"] == "NORMAL"
    await s.until(
        lambda st: all(st.jobs[j].state == "COMPLETED" for j in (jobs.queued, jobs.jumped)), 30
    )
    dispatched = [e.job_id for e in await s.events(JobDispatched)]
    assert dispatched[-2:] == [jobs.jumped, jobs.queued], dispatched  # M4: in priority order
    changes = await s.events(MaintenanceChanged)
    assert [(c.state, c.by) for c in changes] == [
        ("DRAINING", "admin"),
        ("BACKFILL_RECOVERY", "dispatcher"),
        ("ACTIVE", "dispatcher"),
        ("NORMAL", "admin"),
    ], changes
    assert [c.message for c in changes][::3] == ["NFS volume swap", "done"]
    assert all(c.message for c in changes), changes  # why, for the automatic steps too


async def _no_backfill_or_dispatch_since_recovery(s: SlurmStack, jobs: Jobs) -> None:
    """M2: no backfill decided from BACKFILL_RECOVERY on, and none after ACTIVE at all (an
    instance launched while DRAINING may be recorded just after the step, then is reclaimed
    before ACTIVE); D6: no dispatch during maintenance."""
    events = await s.events(MaintenanceChanged, BackfillStarted, BackfillEnded, JobDispatched)
    states = [e.state if isinstance(e, MaintenanceChanged) else None for e in events]
    draining, recovery = states.index("DRAINING"), states.index("BACKFILL_RECOVERY")
    active = states.index("ACTIVE")
    late = [e for e in events[recovery:] if isinstance(e, BackfillStarted)]
    assert all(e.ts <= events[recovery].ts for e in late), late  # decided while DRAINING
    reclaimed = {e.backfill_id for e in events[recovery:active] if isinstance(e, BackfillEnded)}
    assert {e.backfill_id for e in late} <= reclaimed, (late, reclaimed)
    assert not [e for e in events[active:] if isinstance(e, (BackfillStarted, BackfillEnded))]
    assert not [e for e in events[draining:] if isinstance(e, JobDispatched)], events
    assert {s.state.jobs[j].state for j in (jobs.queued, jobs.jumped)} == {"GLOBAL_QUEUE_WAIT"}
