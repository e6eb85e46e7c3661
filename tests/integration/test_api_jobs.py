"""SPEC §8 jobs endpoints through HTTP against the real stack (gateway + intake + projections).

Tests marked "needs intake" skip with a reason while helper G's intake has no workers."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from jpu.events import (
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobStarted,
    JobSubmitted,
    ReservationStarted,
)
from jpu.testing.api import Api, assert_error, bearer, job_body
from jpu_services.gateway.ratelimit import RateLimiter
from jpu_services.gateway.routes import jobs as jobs_routes


def _jid() -> str:
    return "j" + uuid.uuid4().hex[:12]


async def _queued_job(
    api: Api,
    user: str,
    lab: str,
    *,
    promote: bool = True,
    n: int = 1,
    tiers: list[str] | None = None,
) -> str:
    """A job the way intake would record it (appended directly: no intake needed)."""
    job_id = _jid()
    events = [
        JobSubmitted(
            **api.kw(),
            job_id=job_id,
            lab=lab,
            user=user,
            name="t",
            command="secret-command --flag",
            num_gpus=n,
            env={"A": "1"},
            tiers=tiers,
        )
    ]
    if promote:
        events.append(JobPromoted(**api.kw(1), job_id=job_id, queue_entered_at=api.clock.now()))
    await api.append(*events)
    return job_id


# --- submit: shape and verdicts (Q1, Q2, Q3, Q6) --------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (job_body(num_gpus=0), "num_gpus"),
        (job_body(num_gpus=9), "num_gpus"),
        (job_body(num_gpus="2"), "num_gpus"),
        (job_body(tiers=["h100"]), "tiers"),
        (job_body(command="x" * (64 * 1024 + 1)), "command"),
        (job_body(env={"CUDA_VISIBLE_DEVICES": "0"}), "env"),
        (job_body(tier="rtx4090"), "tier"),  # misspelt "tiers": never silently any tier
    ],
    ids=[
        "gpus0",
        "gpus9",
        "gpus-string",
        "unknown-tier",
        "oversized-command",
        "env-cuda",
        "unknown-field",
    ],
)
async def test_Q1_submit_validation_names_the_field(api: Api, body: dict, field: str) -> None:
    err = assert_error(await api.submit("alice", body), 422, "VALIDATION_ERROR")
    assert field in str(err["details"]) or field in err["message"], err
    assert (await api.pool.fetchval("SELECT count(*) FROM jobs")) == 0  # nothing queued


async def test_A_submit_body_shape_is_checked_by_the_gateway(api: Api) -> None:
    h = bearer("alice") | {"Content-Type": "application/json"}
    for raw in (b"[1, 2]", b"not json", b""):
        err = assert_error(
            await api.client.post("/v1/jobs", content=raw, headers=h), 422, "VALIDATION_ERROR"
        )
        assert err["details"]["field"] == "body"
    err = assert_error(
        await api.client.post(
            "/v1/jobs", json=job_body(), headers=bearer("alice") | {"Idempotency-Key": ""}
        ),
        422,
        "VALIDATION_ERROR",
    )
    assert err["details"]["field"] == "Idempotency-Key"


async def test_Q2_no_fit_placement_for_4_gpus(api: Api) -> None:
    assert_error(await api.submit("alice", job_body(num_gpus=4)), 422, "NO_FIT_PLACEMENT")
    assert (await api.pool.fetchval("SELECT count(*) FROM jobs")) == 0


async def test_Q4_submit_returns_the_job_read_your_writes(api: Api) -> None:
    r = await api.submit("alice", job_body(num_gpus=2, tiers=["rtx4090"]))
    assert r.status_code == 201, r.text
    job = r.json()
    assert r.headers["location"] == f"/v1/jobs/{job['id']}"
    assert (job["user"], job["lab"], job["num_gpus"], job["attempt"]) == ("bcg-alice", "BCG", 2, 1)
    assert job["state"] in (
        "PERSONAL_QUEUE_WAIT",
        "GLOBAL_QUEUE_WAIT",
        "RESERVING",
        "DISPATCHED",
        "RUNNING",
    )
    shown = (await api.client.get(f"/v1/jobs/{job['id']}", headers=bearer("alice"))).json()
    assert shown["id"] == job["id"] and shown["command"] == "python train.py"


async def test_Q4_the_201_is_intakes_view_of_the_job_and_the_next_get_agrees(api: Api) -> None:
    """A submit is answered from intake's reply (its fold's view of the job, put in the jobs
    projection's own row shape), not from a projection read; the same user's next GET waits
    for that event's seq (read-your-writes) and shows the same job, field by field: its D7
    reason in the personal queue (Q9 held) included."""
    for body in (job_body(env={"A": "1"}), job_body(hold=True, name="held")):
        r = await api.submit("alice", body)
        assert r.status_code == 201, r.text
        created = r.json()
        shown = (await api.client.get(f"/v1/jobs/{created['id']}", headers=bearer("alice"))).json()
        differ = {
            k: (v, shown.get(k))
            for k, v in created.items()
            if k not in ("rank", "decided_at") and shown.get(k) != v
        }
        assert differ == {}, differ
        assert created["command"] == "python train.py" and created["terminal"] is False
    assert created["state"] == "PERSONAL_QUEUE_WAIT" and created["pending_reason"] == "Held"
    listed = (await api.client.get("/v1/jobs", headers=bearer("alice"))).json()["jobs"]
    assert created["id"] in {j["id"] for j in listed}  # the list waits for it too


async def test_Q6_idempotent_replay_200_and_conflict_409(api: Api) -> None:
    first = await api.submit("alice", job_body(), key="k-1")
    assert first.status_code == 201, first.text
    again = await api.submit("alice", job_body(), key="k-1")
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert_error(
        await api.submit("alice", job_body(num_gpus=2), key="k-1"), 409, "IDEMPOTENCY_CONFLICT"
    )
    assert (await api.pool.fetchval("SELECT count(*) FROM jobs")) == 1
    other = await api.submit("bob", job_body(), key="k-1")  # keys are per user
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]


async def test_A_429_after_the_submit_rate_limit(api: Api) -> None:
    t = [0.0]
    api.app.state.submit_limiter = RateLimiter(rate_per_s=0.5, burst=3, clock=lambda: t[0])
    for _ in range(3):  # the burst passes the limiter (intake's verdict is not the point here)
        assert (await api.submit("alice", job_body(num_gpus=0))).status_code != 429
    r = await api.submit("alice", job_body())
    err = assert_error(r, 429, "RATE_LIMITED")
    assert r.headers["retry-after"] == "2" and err["details"]["retry_after_s"] == 2.0
    assert (await api.submit("bob", job_body(num_gpus=0))).status_code != 429  # per user
    t[0] = 2.0  # one token refilled
    assert (await api.submit("alice", job_body(num_gpus=0))).status_code != 429
    assert_error(await api.submit("alice", job_body()), 429, "RATE_LIMITED")


async def test_A_submit_without_intake_is_503_with_a_clear_code(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no intake listens on this subject: NATS says "no responders" at once
    monkeypatch.setattr(jobs_routes.commands, "submit_subject", lambda prefix: "nobody.submit")
    r = await api.submit("alice", job_body())
    err = assert_error(r, 503, "INTAKE_UNAVAILABLE")
    assert "intake" in err["message"] and r.headers["retry-after"]


async def test_O3_submit_waits_for_an_intake_that_is_resubscribing(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No responders means no intake received the command (its NATS node was lost and it is
    resubscribing through another): the gateway sends it again rather than answering 503."""
    real = jobs_routes.commands.submit_subject(api.config.subject_prefix)
    late = f"late.{uuid.uuid4().hex}"

    async def forward(msg: Msg) -> None:  # the intake, once back: answers through the real one
        await msg.respond((await api.bus.nc.request(real, msg.data, timeout=5.0)).data)

    async def back_after_a_second() -> Subscription:
        await asyncio.sleep(1.0)
        return await api.bus.nc.subscribe(late, cb=forward)

    monkeypatch.setattr(jobs_routes.commands, "submit_subject", lambda prefix: late)
    resubscribing = asyncio.create_task(back_after_a_second())
    try:
        r = await api.submit("alice", job_body())
        assert r.status_code == 201, r.text
    finally:
        await (await resubscribing).unsubscribe()


# --- visibility, listing, the job page ------------------------------------------------------


async def test_A_403_cancelling_or_reading_another_labs_job(api: Api) -> None:
    job_id = await _queued_job(api, "bcg-alice", "BCG")
    for path in (f"/v1/jobs/{job_id}/cancel",):
        assert_error(await api.client.post(path, headers=bearer("carol")), 403, "FORBIDDEN")
    for path in (f"/v1/jobs/{job_id}", f"/v1/jobs/{job_id}/events"):
        assert_error(await api.client.get(path, headers=bearer("carol")), 403, "FORBIDDEN")
        # same lab, plain user, not the owner: also not allowed (owner / lab_admin / admin)
        assert_error(await api.client.get(path, headers=bearer("bob")), 403, "FORBIDDEN")
        assert (await api.client.get(path, headers=bearer("admin"))).status_code == 200
    assert_error(await api.client.get("/v1/jobs/nope", headers=bearer("alice")), 404, "NOT_FOUND")
    assert_error(
        await api.client.post("/v1/jobs/nope/cancel", headers=bearer("admin")), 404, "NOT_FOUND"
    )


async def test_A_cancel_202_idempotent_then_409_already_terminal(api: Api) -> None:
    job_id = await _queued_job(api, "bcg-alice", "BCG")
    r = await api.client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer("alice"))
    assert r.status_code == 202, r.text
    assert r.json()["state"] == "CANCELLING"  # read-your-writes: the projection shows it
    assert r.json()["cancel_requested_by"] == "bcg-alice"
    # idempotent: again → 202, still one JobCancelRequested in the audit trail
    again = await api.client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer("admin"))
    assert again.status_code == 202, again.text
    trail = (await api.client.get(f"/v1/jobs/{job_id}/events", headers=bearer("alice"))).json()
    assert [e["type"] for e in trail["events"]].count("JobCancelRequested") == 1
    done = await _queued_job(api, "bcg-alice", "BCG")
    await api.append(JobEnded(**api.kw(), job_id=done, attempt=1, state="COMPLETED"))
    assert_error(
        await api.client.post(f"/v1/jobs/{done}/cancel", headers=bearer("alice")),
        409,
        "ALREADY_TERMINAL",
    )


async def test_A_list_jobs_visibility_filters_and_pagination(api: Api) -> None:
    mine = [await _queued_job(api, "bcg-alice", "BCG") for _ in range(3)]
    bobs = await _queued_job(api, "bcg-zoe", "BCG", promote=False)  # stays personal (Q5)
    carols = await _queued_job(api, "kdg-carol", "KDG")

    async def ids(who: str, query: str = "") -> set[str]:
        r = await api.client.get(f"/v1/jobs{query}", headers=bearer(who))
        assert r.status_code == 200, r.text
        return {j["id"] for j in r.json()["jobs"]}

    assert await ids("alice") == set(mine)  # a user sees their own jobs
    assert await ids("admin") == {*mine, bobs, carols}  # an admin sees all
    assert await ids("admin", "?lab=KDG") == {carols}
    assert await ids("admin", "?user=bcg-zoe") == {bobs}
    assert await ids("admin", "?state=PERSONAL_QUEUE_WAIT") == {bobs}
    assert await ids("admin", "?state=GLOBAL_QUEUE_WAIT,RESERVING") == {*mine, carols}
    assert await ids("alice", "?user=bcg-zoe") == set()  # filters never widen visibility
    # pagination: newest first, cursor continues
    seen: list[str] = []
    cursor = None
    while True:
        q = "?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = (await api.client.get(f"/v1/jobs{q}", headers=bearer("admin"))).json()
        assert len(page["jobs"]) <= 2
        assert all("command" not in j for j in page["jobs"])  # commands only on the job page
        seen += [j["id"] for j in page["jobs"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted({*mine, bobs, carols}) and len(seen) == 5
    assert_error(
        await api.client.get("/v1/jobs?cursor=%%%", headers=bearer("admin")),
        422,
        "VALIDATION_ERROR",
    )


async def test_A_job_page_rank_reason_reservation_placement(api: Api) -> None:
    queued = await _queued_job(api, "bcg-alice", "BCG", n=2, tiers=["rtx4090"])
    personal = await _queued_job(api, "bcg-zoe", "BCG", promote=False)
    await api.decide()  # D1/D7: ranks and reasons are the dispatcher's published decision
    job = (await api.client.get(f"/v1/jobs/{queued}", headers=bearer("alice"))).json()
    assert job["state"] == "GLOBAL_QUEUE_WAIT" and job["rank"] == 1
    assert job["decided_at"] == api.clock.now()
    # a cycle would dispatch it now (GPUs are idle): it is leaving the queue, no reason to show
    assert job["pending_reason"] is None
    assert job["command"] == "secret-command --flag" and job["env"] == {"A": "1"}
    p = (await api.client.get(f"/v1/jobs/{personal}", headers=bearer("zoe"))).json()
    assert (p["rank"], p["pending_reason"]) == (None, "ConcurrencyLimit")  # D7 personal queue
    # other jobs run on one GPU of each rtx4090 placement: a reservation (R2) waits for more
    for node, gpu in (("gpu-4090x2-01", 1), ("gpu-4090x2-02", 0)):
        filler = await _queued_job(api, "kdg-carol", "KDG")
        await api.append(
            JobDispatched(
                **api.kw(1), job_id=filler, attempt=1, node=node, tier="rtx4090", gpus=[gpu]
            )
        )
    await api.append(
        ReservationStarted(
            **api.kw(2), job_id=queued, node="gpu-4090x2-01", tier="rtx4090", gpus=[0]
        )
    )
    await api.decide()
    job = (await api.client.get(f"/v1/jobs/{queued}", headers=bearer("admin"))).json()
    assert job["state"] == "RESERVING" and job["pending_reason"] == "Reservation"
    assert job["reservation"] == {
        "node": "gpu-4090x2-01",
        "tier": "rtx4090",
        "gpus": [0],
        "since": api.clock.now() + 2,
    }
    # ... then a dispatch + start: placement, backend job id, isolation (X4, X6)
    await api.append(
        JobDispatched(
            **api.kw(3), job_id=queued, attempt=1, node="gpu-4090x2-01", tier="rtx4090", gpus=[0, 1]
        ),
        JobStarted(
            **api.kw(4), job_id=queued, attempt=1, backend_job_id="4242", isolation="unshare-net"
        ),
    )
    job = (await api.client.get(f"/v1/jobs/{queued}", headers=bearer("alice"))).json()
    assert job["state"] == "RUNNING" and job["rank"] is None and job["pending_reason"] is None
    assert job["placement"] == {"node": "gpu-4090x2-01", "tier": "rtx4090", "gpus": [0, 1]}
    assert job["reservation"] is None
    assert (job["backend_job_id"], job["isolation"]) == ("4242", "unshare-net")
    assert job["usage_charged"] == 0.0


async def test_E2_job_events_are_the_audit_trail_in_order(api: Api) -> None:
    job_id = await _queued_job(api, "bcg-alice", "BCG")
    await _queued_job(api, "bcg-alice", "BCG")  # another job's events stay out
    r = await api.client.get(f"/v1/jobs/{job_id}/events", headers=bearer("alice"))
    events = r.json()["events"]
    assert [e["type"] for e in events] == ["JobSubmitted", "JobPromoted"]
    assert events[0]["seq"] < events[1]["seq"] and events[0]["job_id"] == job_id
    assert events[0]["command"] == "secret-command --flag"


async def test_D7_Q7_ArrayThrottle_is_the_job_views_reason_for_a_task_beyond_its_percent_N(
    api: Api,
) -> None:
    """SPEC D7, Q7: right after an array's submit, intake promotes its first `%N` tasks at once;
    a task beyond them waits for its array, not for a slot (Q5). The job view, the queue and
    the domain's own answer (jpu.domain.promotion.personal_standing, as `jpu why` reads it) say
    the same: ArrayThrottle for the task beyond `%2`, ConcurrencyLimit for the ones it lets
    through."""
    from jpu.domain.cluster import ClusterState
    from jpu.domain.promotion import personal_standing
    from jpu.testing.fold import fold

    r = await api.client.post("/v1/jobs", json=job_body(array="0-5%2"), headers=bearer("alice"))
    assert r.status_code == 201, r.text
    aid = r.json()["id"]
    body = (await api.client.get(f"/v1/jobs/{aid}_4", headers=bearer("alice"))).json()
    assert (body["state"], body["pending_reason"]) == ("PERSONAL_QUEUE_WAIT", "ArrayThrottle")
    first = (await api.client.get(f"/v1/jobs/{aid}_0", headers=bearer("alice"))).json()
    assert first["pending_reason"] == "ConcurrencyLimit", first
    queue = (await api.client.get("/v1/queue", headers=bearer("alice"))).json()["queue"]
    shown = {e["job_id"]: e["pending_reason"] for e in queue if e["job_id"].startswith(aid)}
    state = fold([d async for d in api.bus.replay()], ClusterState.new(api.config))
    domain = {j: personal_standing(state, api.config, state.jobs[j])[0] for j in shown}
    assert shown == domain, (shown, domain)
    assert [shown[f"{aid}_{k}"] for k in range(6)] == ["ConcurrencyLimit"] * 2 + [
        "ArrayThrottle"
    ] * 4


async def test_Q7_an_arrays_events_are_its_own_for_its_owner_and_forbidden_to_others(
    api: Api,
) -> None:
    """Q7, E2: `GET /v1/jobs/{array id}/events` (the console's array page asks it) answers the
    array's own audit trail, its one submit, by its id whole or a prefix (U8), as
    `GET /v1/jobs/{array id}` does, not a 422 for the many tasks the id starts."""
    r = await api.client.post("/v1/jobs", json=job_body(array="0-2"), headers=bearer("alice"))
    assert r.status_code == 201, r.text
    aid = r.json()["id"]
    for given in (aid, aid[:8]):
        got = await api.client.get(f"/v1/jobs/{given}/events", headers=bearer("alice"))
        assert got.status_code == 200, got.text
        trail = got.json()
        assert trail["job_id"] == aid
        assert [(e["type"], e["job_id"]) for e in trail["events"]] == [("JobSubmitted", aid)]
    forbidden = await api.client.get(f"/v1/jobs/{aid}/events", headers=bearer("carol"))
    assert_error(forbidden, 403, "FORBIDDEN")
