"""SPEC X4a through `/v1/workspaces` and `POST /v1/jobs` against the real gateway, intake and
projections (real NATS + PostgreSQL). The builds themselves are the agent's
(tests/integration/test_workspace_builder.py): here the builder's outcome is appended as it
would append it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import msgspec
import pytest

from jpu.events import (
    JobSubmitted,
    WorkspaceBuildFailed,
    WorkspaceBuilt,
    WorkspaceDefaultChanged,
    WorkspaceEvent,
)
from jpu.testing.api import Api, assert_error, bearer, job_body
from jpu.testing.cli import failed, jpu, ok

SIX = {"name": "six", "requirements": "six\n"}


async def _build(api: Api, who: str, body: Mapping[str, object]) -> dict[str, object]:
    r = await api.client.post("/v1/workspaces", json=body, headers=bearer(who))
    assert r.status_code == 202, r.text
    return dict(r.json())


async def _outcome(api: Api, ws: dict[str, object], ok: bool = True) -> None:
    """What the agent's workspace-builder appends when the build ends."""
    wid, build = str(ws["id"]), int(str(ws["build"]))
    event: WorkspaceEvent = (
        WorkspaceBuilt(**api.kw(), workspace_id=wid, build=build, created_at=api.clock.now(),
                       image=f"localhost/jpu-ws-{wid}-b{build}:latest", size=1000, log="done")
        if ok
        else WorkspaceBuildFailed(**api.kw(), workspace_id=wid, build=build,
                                  reason="podman exited 1 (see the build log)",
                                  log="ERROR: Invalid requirement: 'not a requirement !!'")
    )  # fmt: skip
    await api.append(event, projection="workspaces")


async def _events(api: Api) -> int:
    return await api.bus.last_seq()


async def test_X4a_build_is_BUILDING_then_READY_and_a_job_in_it_records_its_image(
    api: Api,
) -> None:
    ws = await _build(api, "alice", SIX)
    assert ws["state"] == "BUILDING" and ws["scope"] == "user" and ws["user"] == "bcg-alice"
    before = await _events(api)  # a job naming a BUILDING workspace: 422, nothing appended
    r = await api.submit("alice", job_body(workspace="six"))
    assert assert_error(r, 422, "VALIDATION_ERROR")["details"]["field"] == "workspace"
    assert "BUILDING" in r.json()["error"]["message"] and await _events(api) == before

    await _outcome(api, ws)
    shown = (await api.client.get("/v1/workspaces/six", headers=bearer("alice"))).json()
    assert shown["state"] == "READY" and shown["size"] == 1000 and shown["created_at"]
    r = await api.submit("alice", job_body(workspace="six"))
    assert r.status_code == 201, r.text
    assert r.json()["workspace"] == "six"  # the job's view shows its workspace
    first = (await api.bus.job_events(r.json()["id"]))[0].event
    assert isinstance(first, JobSubmitted) and first.workspace == "six"
    assert first.workspace_image == shown["image"]
    # bob (same lab) has no workspace "six" of his own, and alice's is not his to use
    r = await api.submit("bob", job_body(workspace="six"))
    assert assert_error(r, 422, "VALIDATION_ERROR")["details"]["field"] == "workspace"


async def test_X4a_failed_build_shows_its_log_and_a_job_naming_it_gets_422(api: Api) -> None:
    ws = await _build(api, "alice", {"name": "broken", "requirements": "not a requirement !!\n"})
    await _outcome(api, ws, ok=False)
    shown = (await api.client.get("/v1/workspaces/broken", headers=bearer("alice"))).json()
    assert shown["state"] == "FAILED" and "build log" in shown["reason"]
    log = await api.client.get("/v1/workspaces/broken/log", headers=bearer("alice"))
    assert log.status_code == 200 and "Invalid requirement" in log.text
    before = await _events(api)
    for name in ("broken", "missing"):
        r = await api.submit("alice", job_body(workspace=name))
        assert assert_error(r, 422, "VALIDATION_ERROR")["details"]["field"] == "workspace"
    assert await _events(api) == before  # nothing appended


async def test_X4a_another_labs_user_cannot_read_or_use_a_users_workspace(api: Api) -> None:
    await _outcome(api, await _build(api, "alice", SIX))
    for path in ("/v1/workspaces/six", "/v1/workspaces/six/log"):
        r = await api.client.get(path, params={"user": "bcg-alice"}, headers=bearer("carol"))
        assert_error(r, 404, "NOT_FOUND")
    listed = (await api.client.get("/v1/workspaces", headers=bearer("carol"))).json()
    assert listed["workspaces"] == []
    r = await api.submit("carol", job_body(workspace="six"))
    assert assert_error(r, 422, "VALIDATION_ERROR")["details"]["field"] == "workspace"
    r = await api.client.delete("/v1/workspaces/six", params={"user": "bcg-alice"},
                                headers=bearer("carol"))  # fmt: skip
    assert_error(r, 404, "NOT_FOUND")


async def test_X4a_a_labs_workspace_is_used_by_its_members_built_by_its_admins(api: Api) -> None:
    r = await api.client.post("/v1/workspaces", json={**SIX, "scope": "lab"}, headers=bearer("bob"))
    assert_error(r, 403, "FORBIDDEN")
    ws = await _build(api, "admin", {**SIX, "scope": "lab"})  # admin of lab BCG
    await _outcome(api, ws)
    listed = (await api.client.get("/v1/workspaces", headers=bearer("bob"))).json()
    assert [w["name"] for w in listed["workspaces"]] == ["six"]
    assert (await api.submit("bob", job_body(workspace="six"))).status_code == 201
    r = await api.client.delete("/v1/workspaces/six", headers=bearer("bob"))
    assert_error(r, 403, "FORBIDDEN")
    r = await api.submit("carol", job_body(workspace="six"))  # lab KDG: not theirs
    assert assert_error(r, 422, "VALIDATION_ERROR")["details"]["field"] == "workspace"


async def test_X4a_lab_quota_refusal_names_the_quota(api: Api) -> None:
    settings = api.app.state.settings
    base = msgspec.structs.replace(settings.base, workspace_max_count=1)
    api.app.state.settings = dataclasses.replace(settings, base=base)
    await _build(api, "alice", SIX)
    before = await _events(api)
    r = await api.client.post("/v1/workspaces", json={**SIX, "name": "seven"},
                              headers=bearer("bob"))  # fmt: skip
    err = assert_error(r, 409, "QUOTA_EXCEEDED")
    assert err["details"]["field"] == "workspace_max_count" and await _events(api) == before


async def test_X4a_rebuild_and_delete(api: Api) -> None:
    ws = await _build(api, "alice", SIX)
    r = await api.client.post("/v1/workspaces/six/rebuild", headers=bearer("alice"))
    assert_error(r, 409, "CONFLICT")  # already building
    await _outcome(api, ws)
    r = await api.client.post("/v1/workspaces/six/rebuild", headers=bearer("alice"))
    assert r.status_code == 202 and r.json()["build"] == 2 and r.json()["state"] == "BUILDING"
    r = await api.client.delete("/v1/workspaces/six", headers=bearer("alice"))
    assert r.status_code == 200 and r.json()["deleted"] is True
    r = await api.client.get("/v1/workspaces/six", headers=bearer("alice"))
    assert_error(r, 404, "NOT_FOUND")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "Bad Name", "requirements": "six"}, "name"),
        ({"name": "ok"}, "requirements"),
        ({"name": "ok", "requirements": "six", "scope": "world"}, "scope"),
        ({"name": "ok", "environment": "dependencies: [python=3.9, six]"}, "environment"),
        ({"name": "ok", "requirements": "six", "colour": "red"}, "colour"),
    ],
    ids=["name", "no-source", "scope", "env-python-pin", "unknown-field"],
)
async def test_X4a_a_bad_build_request_is_422_naming_its_field(
    api: Api, body: dict[str, object], field: str
) -> None:
    r = await api.client.post("/v1/workspaces", json=body, headers=bearer("alice"))
    assert assert_error(r, 422, "VALIDATION_ERROR")["details"]["field"] == field


async def test_X4a_environment_yml_becomes_pip_requirements(api: Api) -> None:
    env = "name: x\ndependencies:\n  - python\n  - six=1.16.0\n  - pip:\n    - tomli\n"
    ws = await _build(api, "alice", {"name": "envy", "environment": env})
    assert ws["source_kind"] == "environment"
    row = await api.pool.fetchrow("SELECT source FROM workspaces WHERE name = 'envy'")
    assert row["source"] == "six==1.16.0\ntomli\n"


async def test_X4a_a_users_default_workspace_applies_to_jobs_that_name_none(api: Api) -> None:
    h = bearer("alice")
    assert (await api.client.get("/v1/me/workspace", headers=h)).json() == {
        "user": "bcg-alice", "workspace": None, "seq": 0,
    }  # fmt: skip
    # a default must name a workspace the user may use: 404 naming `workspace` (a missing
    # resource, SPEC §8), nothing appended
    before = await _events(api)
    r = await api.client.put("/v1/me/workspace", json={"workspace": "six"}, headers=h)
    assert assert_error(r, 404, "NOT_FOUND")["details"]["field"] == "workspace"
    assert await _events(api) == before
    ws = await _build(api, "alice", SIX)
    put = await api.client.put("/v1/me/workspace", json={"workspace": "six"}, headers=h)
    assert put.status_code == 200, put.text  # still BUILDING: a default may be set already
    got = (await api.client.get("/v1/me/workspace", headers=h)).json()
    assert got == {"user": "bcg-alice", "workspace": "six", "seq": put.json()["seq"]}
    (last,) = [d.event async for d in api.bus.replay() if d.seq == got["seq"]]
    assert isinstance(last, WorkspaceDefaultChanged) and last.user == "bcg-alice"
    r = await api.submit("alice", job_body())  # names none while the default is BUILDING
    assert assert_error(r, 422, "VALIDATION_ERROR")["details"]["field"] == "workspace"

    await _outcome(api, ws)
    r = await api.submit("alice", job_body())  # names none: runs in the default
    assert r.status_code == 201, r.text
    first = (await api.bus.job_events(r.json()["id"]))[0].event
    assert isinstance(first, JobSubmitted) and first.workspace == "six"
    assert first.workspace_image and first.workspace_image.startswith("localhost/jpu-ws-")
    r = await api.submit("bob", job_body())  # another user's default is not his
    first = (await api.bus.job_events(r.json()["id"]))[0].event
    assert isinstance(first, JobSubmitted) and first.workspace is None

    cleared = await api.client.put("/v1/me/workspace", json={"workspace": None}, headers=h)
    assert cleared.status_code == 200 and cleared.json()["workspace"] is None
    r = await api.submit("alice", job_body())
    first = (await api.bus.job_events(r.json()["id"]))[0].event
    assert isinstance(first, JobSubmitted) and first.workspace is None  # the base image again


async def test_X4a_jpu_workspace_default_sets_shows_and_clears_it(server: str, api: Api) -> None:
    assert ok(await jpu(server, "alice", "workspace", "default")) == "no default workspace\n"
    err = failed(await jpu(server, "alice", "workspace", "default", "six"), "NOT_FOUND")
    assert "workspace" in err  # no such workspace yet: refused, nothing appended
    await _build(api, "alice", SIX)
    out = ok(await jpu(server, "alice", "workspace", "default", "six"))
    assert out == "default workspace: six\n"
    got = json.loads(ok(await jpu(server, "alice", "workspace", "default", "--json")))
    assert (got["user"], got["workspace"]) == ("bcg-alice", "six") and got["seq"] > 0
    out = ok(await jpu(server, "alice", "workspace", "default", "--clear"))
    assert out == "no default workspace\n"
    defaults = [d.event async for d in api.bus.replay()
                if isinstance(d.event, WorkspaceDefaultChanged)]  # fmt: skip
    assert [e.workspace for e in defaults] == ["six", None]
