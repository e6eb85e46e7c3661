"""SPEC Q10 through HTTP on the real gateway and intake: a job's `mail_type`/`mail_user` are
recorded on its JobSubmitted, a user's defaults are an event on the log, and every refusal is a
422 naming the field with nothing appended."""

from __future__ import annotations

import pytest

from jpu.events import (
    IdentityEvent,
    JobSubmitted,
    NodeInventoryObserved,
    NotificationSettingsChanged,
)
from jpu.store.projection import wait_applied
from jpu.testing.api import Api, assert_error, bearer, job_body


async def _log(api: Api) -> list[object]:
    """What requests appended (the fixture's inventory of the nodes and its users left out)."""
    setup = (NodeInventoryObserved, IdentityEvent)
    return [d.event async for d in api.bus.replay() if not isinstance(d.event, setup)]


async def test_submit_records_mail_type_and_mail_user_Q10(api: Api) -> None:
    r = await api.submit("alice", job_body(mail_type="end,FAIL", mail_user="a@lab.example"))
    assert r.status_code == 201, r.text
    (sub,) = [e for e in await _log(api) if isinstance(e, JobSubmitted)]
    assert (sub.mail_type, sub.mail_user) == (["END", "FAIL"], "a@lab.example")


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"mail_type": "END,SOMETIMES"}, "mail_type"),
        ({"mail_type": ["NONE", "END"]}, "mail_type"),
        ({"mail_type": 3}, "mail_type"),
        ({"mail_user": "not an address"}, "mail_user"),
        ({"mail_user": ["a@b.example"]}, "mail_user"),
    ],
    ids=["unknown-kind", "none-and-end", "number", "bad-address", "list-address"],
)
async def test_submit_refuses_bad_mail_fields_naming_them_Q10(
    api: Api, over: dict[str, object], field: str
) -> None:
    err = assert_error(await api.submit("alice", job_body(**over)), 422, "VALIDATION_ERROR")
    assert err["details"]["field"] == field, err
    assert await _log(api) == []  # nothing appended


async def test_me_notifications_put_then_get_is_an_event_on_the_log_Q10(api: Api) -> None:
    h = bearer("alice")
    r = await api.client.get("/v1/me/notifications", headers=h)
    assert r.json() == {"user": "bcg-alice", "email": None, "webhook_url": None, "mail_type": [],
                        "seq": 0}  # fmt: skip
    body = {"email": "alice@lab.example", "webhook_url": "https://hooks.example/T/B/x",
            "mail_type": ["END", "FAIL"]}  # fmt: skip
    put = await api.client.put("/v1/me/notifications", json=body, headers=h)
    assert put.status_code == 200, put.text
    got = (await api.client.get("/v1/me/notifications", headers=h)).json()
    assert got == {**body, "user": "bcg-alice", "seq": put.json()["seq"]}
    (e,) = await _log(api)
    assert isinstance(e, NotificationSettingsChanged) and e.user == "bcg-alice"
    other = (await api.client.get("/v1/me/notifications", headers=bearer("bob"))).json()
    assert other["seq"] == 0  # one user's settings are their own
    for projection in ("jobs", "maintenance", "gpu_resources"):  # they pass over it, no fault
        await wait_applied(api.pool, projection, put.json()["seq"], timeout=15)
    assert (await api.client.get("/readyz")).json()["status"] == "ready"  # not "degraded"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"webhook_url": "ftp://hooks.example/x"}, "webhook_url"),
        ({"webhook_url": "http://"}, "webhook_url"),
        ({"email": "alice"}, "email"),
        ({"mail_type": "SOMETIMES"}, "mail_type"),
        ({"mail_type": 5}, "mail_type"),
        ({"emial": "a@b.example"}, "emial"),
    ],
    ids=["ftp-url", "no-host", "bad-email", "unknown-kind", "number", "unknown-field"],
)
async def test_me_notifications_refusals_name_the_field_nothing_appended_Q10(
    api: Api, body: dict[str, object], field: str
) -> None:
    r = await api.client.put("/v1/me/notifications", json=body, headers=bearer("alice"))
    err = assert_error(r, 422, "VALIDATION_ERROR")
    assert err["details"]["field"] == field, err
    assert await _log(api) == []
