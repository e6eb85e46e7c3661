"""`GET /v1/backfill` (SPEC §8, §6 B1–B3) from the `backfill` projection: every live instance,
with its endpoint, also on a GPU a reservation now covers (R2, B4), gone once it ended."""

from __future__ import annotations

from typing import Any

from jpu.events import (
    BackfillEnded,
    BackfillStarted,
    JobPromoted,
    JobSubmitted,
    ReservationStarted,
)
from jpu.store.projection import wait_applied
from jpu.testing.api import Api, bearer

NODE, TIER = "gpu-4090x2-01", "rtx4090"


async def _append(api: Api, *events: Any) -> None:
    seq = await api.append(*events, projection="gpu_resources")
    await wait_applied(api.pool, "backfill", seq, timeout=15)


def _started(api: Api, bf: str, gpu: int, endpoint: str | None = None) -> BackfillStarted:
    return BackfillStarted(
        **api.kw(), backfill_id=bf, node=NODE, tier=TIER, gpu=gpu,
        backend_job_id=f"localbf-{bf}", endpoint=endpoint,
    )  # fmt: skip


async def _live(api: Api) -> list[dict[str, Any]]:
    r = await api.client.get("/v1/backfill", headers=bearer("bob"))
    assert r.status_code == 200, r.text
    return list(r.json()["backfill"])


async def test_B1_backfill_lists_live_instances_with_endpoint_and_backend_job(api: Api) -> None:
    await _append(
        api,
        _started(api, "bf-0", 0, "http://127.0.0.1:41000/v1"),
        _started(api, "bf-1", 1, "http://127.0.0.1:41001/v1"),
    )
    live = await _live(api)
    assert [b["backfill_id"] for b in live] == ["bf-0", "bf-1"]
    first = live[0]
    assert first | {"started_at": None} == {
        "backfill_id": "bf-0",
        "node": NODE,
        "tier": TIER,
        "gpu": 0,
        "backend_job_id": "localbf-bf-0",
        "endpoint": "http://127.0.0.1:41000/v1",
        "started_at": None,
        "gpu_state": "backfill:bf-0",
    }
    assert first["started_at"] == api.clock.now()


async def test_R2_B4_backfill_on_a_reserved_gpu_is_still_listed(api: Api) -> None:
    """A reservation may cover a backfilled GPU; the instance serves until the dispatch."""
    await _append(api, _started(api, "bf-r", 1, "http://127.0.0.1:41002/v1"))
    t = api.clock.now()
    await api.append(
        JobSubmitted(
            **api.kw(), job_id="big", lab="KDG", user="kdg-carol", name="big",
            command="train", num_gpus=2,
        ),
        JobPromoted(**api.kw(), job_id="big", queue_entered_at=t),
    )  # fmt: skip
    await _append(api, ReservationStarted(**api.kw(), job_id="big", node=NODE, tier=TIER, gpus=[1]))
    [inst] = await _live(api)
    assert (inst["backfill_id"], inst["gpu"]) == ("bf-r", 1)
    assert inst["endpoint"] == "http://127.0.0.1:41002/v1"
    assert inst["gpu_state"] == "reserved:big"  # gpu_resources no longer says backfill


async def test_B2_ended_backfill_disappears_and_never_comes_back(api: Api) -> None:
    await _append(api, _started(api, "bf-a", 0), _started(api, "bf-b", 1))
    await _append(
        api,
        BackfillEnded(
            **api.kw(), backfill_id="bf-a", node=NODE, tier=TIER, gpu=0, reason="preempted"
        ),
    )
    assert [b["backfill_id"] for b in await _live(api)] == ["bf-b"]
    # a late duplicate of the start (another event id) does not resurrect it
    await _append(api, _started(api, "bf-a", 0))
    assert [b["backfill_id"] for b in await _live(api)] == ["bf-b"]
    row = await api.pool.fetchrow(
        "SELECT end_reason, ended_at FROM backfill_instances WHERE backfill_id = 'bf-a'"
    )
    assert row["end_reason"] == "preempted" and row["ended_at"] == api.clock.now()
