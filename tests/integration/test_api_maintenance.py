"""SPEC §7 maintenance through HTTP: admin start/end, anonymous status (M5), 503 on submit (Q3)."""

from __future__ import annotations

from jpu.events import JobPromoted, JobSubmitted
from jpu.testing.api import Api, assert_error, bearer, job_body


async def _maintenance(api: Api, who: str, action: str, message: str = ""):
    return await api.client.post(
        "/v1/admin/maintenance", headers=bearer(who), json={"action": action, "message": message}
    )


async def test_M1_M4_admin_starts_and_ends_maintenance(api: Api) -> None:
    status = await api.client.get("/v1/maintenance/status")  # anonymous (M5)
    assert status.status_code == 200 and status.json()["state"] == "NORMAL"
    assert_error(await _maintenance(api, "alice", "start"), 403, "FORBIDDEN")
    assert_error(await _maintenance(api, "admin", "end"), 409, "NOT_IN_MAINTENANCE")
    r = await _maintenance(api, "admin", "start", "NFS volume swap")
    assert r.status_code == 200, r.text
    assert {k: r.json()[k] for k in ("state", "message", "by")} == {
        "state": "DRAINING",
        "message": "NFS volume swap",
        "by": "admin",
    }
    status = (await api.client.get("/v1/maintenance/status")).json()  # read-your-writes
    assert status == {"state": "DRAINING", "since": api.clock.now(), "message": "NFS volume swap"}
    assert_error(await _maintenance(api, "admin", "start"), 409, "ALREADY_IN_MAINTENANCE")
    # M5: every GET works during maintenance
    for path in ("/v1/queue", "/v1/placements", "/v1/labs", "/v1/jobs", "/v1/me"):
        assert (await api.client.get(path, headers=bearer("alice"))).status_code == 200, path
    api.clock.advance(60)
    r = await _maintenance(api, "admin", "end")
    assert r.status_code == 200 and r.json()["state"] == "NORMAL"
    assert (await api.client.get("/v1/maintenance/status")).json()["state"] == "NORMAL"
    assert_error(await _maintenance(api, "admin", "pause"), 422, "VALIDATION_ERROR")


async def test_Q3_submit_during_maintenance_is_503(api: Api) -> None:
    assert (await _maintenance(api, "admin", "start")).status_code == 200
    assert_error(await api.submit("alice", job_body()), 503, "SERVICE_MAINTENANCE")
    assert (await api.pool.fetchval("SELECT count(*) FROM jobs")) == 0
    await _maintenance(api, "admin", "end")
    assert (await api.submit("alice", job_body())).status_code == 201


async def test_M1_cancel_is_allowed_while_draining(api: Api) -> None:
    await api.append(
        JobSubmitted(
            **api.kw(),
            job_id="jm",
            lab="BCG",
            user="bcg-alice",
            name="t",
            command="true",
            num_gpus=1,
        ),
        JobPromoted(**api.kw(), job_id="jm", queue_entered_at=api.clock.now()),
    )
    assert (await _maintenance(api, "admin", "start")).status_code == 200
    r = await api.client.post("/v1/jobs/jm/cancel", headers=bearer("alice"))
    assert r.status_code == 202, r.text


async def test_M4_an_admin_end_racing_the_automatic_steps_is_decided_again_not_refused(
    api: Api,
) -> None:
    """The dispatcher moves maintenance on by itself (M2/M3). An admin's `end` that loses the
    race to such a step must be decided again on the new state, not answered 409 CONFLICT."""
    import asyncio

    from jpu.bus import ConcurrencyConflict
    from jpu.events import MaintenanceChanged, decode, new_event_id

    steps = ("DRAINING", "BACKFILL_RECOVERY", "ACTIVE")
    for _ in range(5):
        assert (await _maintenance(api, "admin", "start", "NFS")).status_code == 200
        racing = asyncio.Event()

        async def dispatcher_steps(racing: asyncio.Event) -> None:  # the dispatcher, at full speed
            i = 0
            subject = f"{api.bus.prefix}.maintenance"
            while not racing.is_set():
                msg = await api.bus.js.get_last_msg(api.bus.stream, subject)
                if decode(msg.data).state == "NORMAL":  # type: ignore[union-attr]
                    return  # the admin's end won: the dispatcher steps only in maintenance
                last = int(msg.seq or 0)
                event = MaintenanceChanged(
                    event_id=new_event_id(), ts=api.clock.now(), state=steps[i % 3],
                    by="dispatcher", message="NFS",
                )  # fmt: skip
                try:
                    await api.bus.append(event, expected_last_subject_seq=last)
                except ConcurrencyConflict:  # the admin's end landed first: look again
                    continue
                i += 1
                await asyncio.sleep(0)

        stepper = asyncio.create_task(dispatcher_steps(racing))
        await asyncio.sleep(0.01)
        r = await _maintenance(api, "admin", "end")
        racing.set()
        await stepper
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "NORMAL"
        assert (await api.client.get("/v1/maintenance/status")).json()["state"] == "NORMAL"
