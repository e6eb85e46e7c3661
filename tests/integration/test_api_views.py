"""SPEC §8 read views through HTTP: queue (D1, D7), placements (P1, P2), labs (F3), backfill."""

from __future__ import annotations

import pytest

from jpu.events import (
    BackfillStarted,
    JobDispatched,
    JobPromoted,
    JobSubmitted,
    MaintenanceChanged,
    ReservationStarted,
    UsageCharged,
)
from jpu.store.projection import wait_applied
from jpu.testing.api import DEFAULT_NODES, Api, assert_error, bearer

HOUR = 3600.0
HALF_LIFE = 7 * 24 * HOUR


async def _job(
    api: Api,
    job_id: str,
    lab: str,
    user: str,
    n: int = 1,
    *,
    entered: float,
    tiers: list[str] | None = None,
    promote: bool = True,
) -> None:
    events = [
        JobSubmitted(
            **api.kw(),
            job_id=job_id,
            lab=lab,
            user=user,
            name=job_id,
            command="SECRET",
            num_gpus=n,
            tiers=tiers,
        )
    ]
    if promote:
        events.append(JobPromoted(**api.kw(), job_id=job_id, queue_entered_at=entered))
    await api.append(*events)


async def _charge(api: Api, lab: str, value: float, at: float) -> None:
    await api.append(
        UsageCharged(
            event_id=f"u-{lab}-{at}",
            ts=at,
            lab=lab,
            amount=value,
            value_after=value,
            as_of=at,
            job_id=None,
        ),
        projection="lab_usage",
    )


async def test_D1_queue_in_fair_share_order_with_reasons(api: Api) -> None:
    t = api.clock.now()
    await _charge(api, "BCG", 500_000.0, t - HOUR)  # BCG used more: KDG ranks first (D1)
    await _charge(api, "KDG", 100_000.0, t - HOUR)
    # 3 GPUs taken so that the 4-GPU-wide rtx4090 pool has only one idle GPU left
    for i, (node, gpu) in enumerate(
        (("gpu-4090x2-01", 0), ("gpu-4090x2-01", 1), ("gpu-4090x2-02", 0))
    ):
        await _job(api, f"run{i}", "OSL", "osl-erin", entered=t - 10)
        await api.append(
            JobDispatched(
                **api.kw(), job_id=f"run{i}", attempt=1, node=node, tier="rtx4090", gpus=[gpu]
            )
        )
    await _job(api, "b-old", "BCG", "bcg-alice", 2, entered=t - 50, tiers=["rtx4090"])
    await _job(api, "k-new", "KDG", "kdg-carol", 2, entered=t - 5, tiers=["rtx4090"])
    await _job(api, "k-newer", "KDG", "kdg-carol", 2, entered=t - 4, tiers=["rtx4090"])
    await _job(api, "b-personal", "BCG", "bcg-zoe", entered=0.0, promote=False)
    r = await api.client.get("/v1/queue", headers=bearer("carol"))
    assert [e["rank"] for e in r.json()["queue"]] == [None] * 4  # no cycle has decided yet
    assert r.json()["decided_at"] is None
    await api.decide()  # D1/D7: the dispatcher's cycle, published
    r = await api.client.get("/v1/queue", headers=bearer("carol"))  # any user sees the queue
    assert r.status_code == 200, r.text
    q = r.json()
    assert q["maintenance"] == "NORMAL" and q["global_length"] == 3
    assert q["personal_length"] == 1
    rows = q["queue"]
    assert [(e["rank"], e["job_id"]) for e in rows] == [
        (1, "k-new"),
        (2, "k-newer"),
        (3, "b-old"),
        (None, "b-personal"),
    ]
    assert all("command" not in e for e in rows)  # commands hidden
    assert rows[0]["lab_usage"] == pytest.approx(100_000.0 * 0.5 ** (HOUR / HALF_LIFE))
    assert rows[2]["lab_usage"] == pytest.approx(500_000.0 * 0.5 ** (HOUR / HALF_LIFE))
    # one idle rtx4090 GPU, 2 needed: rank 1 would start a reservation there (D3.c), the others
    # have no placement with enough idle GPUs (D7)
    assert [e["pending_reason"] for e in rows] == [
        "Reservation",
        "Resources",
        "Resources",
        "ConcurrencyLimit",
    ]
    assert {"num_gpus", "user", "lab", "state", "queue_entered_at"} <= set(rows[0])
    # rank-1 reserving holds its reservation; the others are behind it (R1, D7)
    await api.append(
        ReservationStarted(
            **api.kw(), job_id="k-new", node="gpu-4090x2-02", tier="rtx4090", gpus=[1]
        )
    )
    await api.decide()
    rows = (await api.client.get("/v1/queue", headers=bearer("alice"))).json()["queue"]
    assert [(e["job_id"], e["state"], e["pending_reason"]) for e in rows[:3]] == [
        ("k-new", "RESERVING", "Reservation"),
        ("k-newer", "GLOBAL_QUEUE_WAIT", "Resources"),
        ("b-old", "GLOBAL_QUEUE_WAIT", "Resources"),
    ]
    assert rows[0]["reservation"]["gpus"] == [1]


async def test_D7_maintenance_is_every_queued_jobs_reason(api: Api) -> None:
    await _job(api, "a", "BCG", "bcg-alice", entered=api.clock.now())
    await api.append(
        MaintenanceChanged(**api.kw(), state="DRAINING", by="admin"), projection="maintenance"
    )
    await api.decide()
    q = (await api.client.get("/v1/queue", headers=bearer("alice"))).json()
    assert q["maintenance"] == "DRAINING"
    assert [e["pending_reason"] for e in q["queue"]] == ["Maintenance"]


async def test_P1_placements_by_node_and_tier(api: Api) -> None:
    t = api.clock.now()
    await _job(api, "r1", "BCG", "bcg-alice", 2, entered=t)
    await api.append(
        JobDispatched(
            **api.kw(), job_id="r1", attempt=1, node="gpu-4090x2-01", tier="rtx4090", gpus=[0, 1]
        )
    )
    await _job(api, "r2", "KDG", "kdg-carol", 2, entered=t)
    await api.append(
        ReservationStarted(**api.kw(), job_id="r2", node="gpu-4090x2-02", tier="rtx4090", gpus=[0])
    )
    seq = await api.append(
        BackfillStarted(
            **api.kw(), backfill_id="bf-1", node="gpu-3080tix2-01", tier="rtx3080ti", gpu=1
        ),
        projection="gpu_resources",
    )
    await wait_applied(api.pool, "backfill", seq, timeout=15)
    r = await api.client.get("/v1/placements", headers=bearer("bob"))
    assert r.status_code == 200, r.text
    by = {(p["node"], p["tier"]): p for p in r.json()["placements"]}
    assert set(by) == set(DEFAULT_NODES.items())  # P1: one placement per (node, tier)
    full, reserving = by[("gpu-4090x2-01", "rtx4090")], by[("gpu-4090x2-02", "rtx4090")]
    assert (full["capacity"], full["idle"]) == (2, 0)
    assert full["running"] == [{"job_id": "r1", "gpus": [0, 1]}]
    assert (reserving["capacity"], reserving["idle"]) == (2, 1)
    assert reserving["reserved"] == [{"job_id": "r2", "gpus": [0]}]
    assert [g["state"] for g in reserving["gpus"]] == ["reserved:r2", "free"]
    bf = by[("gpu-3080tix2-01", "rtx3080ti")]
    assert (bf["capacity"], bf["idle"]) == (2, 2)  # P2: backfill always yields
    assert bf["backfilled"] == [{"backfill_id": "bf-1", "gpu": 1}]
    live = (await api.client.get("/v1/backfill", headers=bearer("bob"))).json()["backfill"]
    assert [{k: b[k] for k in ("backfill_id", "node", "tier", "gpu")} for b in live] == [
        {"backfill_id": "bf-1", "node": "gpu-3080tix2-01", "tier": "rtx3080ti", "gpu": 1}
    ]


async def test_F3_labs_show_decayed_usage_raw_value_and_counts(api: Api) -> None:
    t = api.clock.now()
    await _charge(api, "BCG", 297_360.0, t - HALF_LIFE)  # one half-life ago
    await _job(api, "q1", "BCG", "bcg-alice", entered=t)
    await _job(api, "q2", "BCG", "bcg-zoe", entered=t, promote=False)
    await _job(api, "run", "BCG", "bcg-bob", entered=t)
    await api.append(
        JobDispatched(
            **api.kw(), job_id="run", attempt=1, node="gpu-4090x2-01", tier="rtx4090", gpus=[0]
        )
    )
    labs = (await api.client.get("/v1/labs", headers=bearer("carol"))).json()
    by = {lab["lab"]: lab for lab in labs["labs"]}
    assert {"BCG", "KDG", "OSL"} <= set(by)  # F6: labs without usage are listed with 0
    bcg = by["BCG"]
    assert bcg["usage"] == pytest.approx(148_680.0)  # F3: half of it after one half-life
    assert (bcg["raw_value"], bcg["as_of"]) == (297_360.0, t - HALF_LIFE)
    assert (bcg["running"], bcg["queued"], bcg["personal_queue"]) == (1, 1, 1)
    assert (by["KDG"]["usage"], by["KDG"]["as_of"], by["KDG"]["running"]) == (0.0, None, 0)
    one = await api.client.get("/v1/labs/BCG", headers=bearer("carol"))
    assert one.json()["usage"] == pytest.approx(148_680.0)
    assert_error(await api.client.get("/v1/labs/NOPE", headers=bearer("carol")), 404, "NOT_FOUND")
    hist = (
        await api.client.get("/v1/usage/history?hours=336&points=3", headers=bearer("carol"))
    ).json()
    series = hist["series"]["BCG"]
    assert series[0][1] == 0.0  # before the charge
    assert [t - HALF_LIFE, 297_360.0] in series  # the charge itself
    assert series[-1] == [t, pytest.approx(148_680.0)]  # decayed to now


async def test_D1_D7_the_api_shows_the_dispatchers_own_rank_and_reason(api: Api) -> None:
    """SPEC D7 with the real dispatcher running: rank and pending reason in the API
    are exactly what the dispatcher published for its cycle (never the gateway's own cycle, and
    never a "None" reason), with the time it decided them."""
    import asyncio

    from jpu.bus.views import ViewStore
    from jpu.testing.fold import Watcher
    from jpu_services.dispatcher.service import run_dispatcher

    stop = asyncio.Event()
    task = asyncio.create_task(run_dispatcher(api.bus, api.config, api.clock, stop))
    try:
        async with Watcher(api.bus, api.config) as w:
            t = api.clock.now()
            for i in range(8):  # every GPU busy with OSL's jobs
                await _job(api, f"busy{i}", "OSL", "osl-erin", entered=t)
            await w.until(lambda s: all(s.jobs[f"busy{i}"].placement for i in range(8)))
            await _job(api, "wait1", "BCG", "bcg-alice", entered=t + 1)
            await _job(api, "wait2", "KDG", "kdg-carol", 2, entered=t + 2)
            deadline = asyncio.get_running_loop().time() + 15
            while True:
                view = await ViewStore(api.bus).queue()
                if view is not None and {"wait1", "wait2"} <= set(view.pending):
                    break
                assert asyncio.get_running_loop().time() < deadline, view
                await asyncio.sleep(0.05)
            await wait_applied(api.pool, "jobs", await api.bus.last_seq(), timeout=15)
            for job_id in ("wait1", "wait2"):
                body = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("admin"))).json()
                assert body["rank"] == view.order.index(job_id) + 1, body
                assert body["pending_reason"] == view.pending[job_id], body
                assert body["pending_reason"] in ("Priority", "Resources", "Reservation")
                assert body["decided_at"] == view.at
            q = (await api.client.get("/v1/queue", headers=bearer("alice"))).json()
            assert q["decided_at"] == view.at
            assert [e["job_id"] for e in q["queue"] if e["rank"]] == [
                j for j in view.order if j in {"wait1", "wait2"}
            ]
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def test_F4_queue_and_labs_show_charged_usage_and_what_running_jobs_accrued(
    api: Api,
) -> None:
    """A lab running 3 GPUs for 10 min has charged usage 0 (F4: charged when the attempts
    end) — that is what orders the queue (D1) and stays `lab_usage`/`usage`. Beside it,
    labelled apart, what its running jobs (and a reservation, for KDG) have accrued so far."""
    t = api.clock.now()
    tflops = {tier.name: tier.tflops for tier in api.config.tiers}
    await _job(api, "r0", "OSL", "osl-erin", 2, entered=t)
    await _job(api, "r1", "OSL", "osl-erin", 1, entered=t)
    await _job(api, "q", "OSL", "osl-erin", 1, entered=t + 1)
    await _job(api, "res", "KDG", "kdg-carol", 2, entered=t + 2)
    await api.append(
        JobDispatched(
            **api.kw(), job_id="r0", attempt=1, node="gpu-4090x2-01", tier="rtx4090", gpus=[0, 1]
        ),
        JobDispatched(
            **api.kw(), job_id="r1", attempt=1, node="gpu-3080tix2-01", tier="rtx3080ti", gpus=[0]
        ),
        ReservationStarted(
            **api.kw(), job_id="res", node="gpu-4090x2-02", tier="rtx4090", gpus=[0]
        ),
    )
    api.clock.advance(600)
    osl = 2 * 600 * tflops["rtx4090"] + 1 * 600 * tflops["rtx3080ti"]  # F1, 3 GPUs
    kdg = 1 * 600 * tflops["rtx4090"]
    q = (await api.client.get("/v1/queue", headers=bearer("carol"))).json()
    by = {e["job_id"]: e for e in [*q["queue"], *q["running"]]}
    for job_id, accrued in (("q", osl), ("r0", osl), ("r1", osl), ("res", kdg)):
        assert by[job_id]["lab_usage"] == 0.0, by[job_id]  # nothing charged yet (F4)
        assert by[job_id]["lab_accrued_uncharged"] == pytest.approx(accrued), by[job_id]
    labs = {
        lab["lab"]: lab
        for lab in (await api.client.get("/v1/labs", headers=bearer("carol"))).json()["labs"]
    }
    assert (labs["OSL"]["usage"], labs["OSL"]["running"]) == (0.0, 2)
    assert labs["OSL"]["accrued_uncharged"] == pytest.approx(osl)
    assert labs["KDG"]["accrued_uncharged"] == pytest.approx(kdg)
    assert labs["BCG"]["accrued_uncharged"] == 0.0
    one = (await api.client.get("/v1/labs/OSL", headers=bearer("carol"))).json()
    assert one["accrued_uncharged"] == pytest.approx(osl)
