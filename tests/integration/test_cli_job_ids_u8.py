"""SPEC U8 through the real CLI (its own process) and the real gateway (HTTP, intake and the
projections on real NATS JetStream + PostgreSQL): a unique prefix on every command, an array
task `PREFIX_K`, task ranges `PREFIX_[2-4,7]` for cancel/hold/release, and the same answer for
a job whether its id is given whole or as a prefix. Every user's limit is 0 here
(test_api_support): jobs stay in their personal queues, where hold and release apply."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest_asyncio

from jpu.testing.api import Api, bearer, job_body
from jpu.testing.cli import failed, jpu, ok
from jpu.testing.inprocess import serve_http


@pytest_asyncio.fixture
async def server(api: Api) -> AsyncIterator[str]:
    async with serve_http(api.app) as url:
        yield url


async def test_U8_prefixes_tasks_and_ranges_on_every_command(server: str, api: Api) -> None:
    r = await api.submit("alice", job_body(array="0-7"))
    assert r.status_code == 201, r.text
    array = r.json()["id"]
    p = array[:7]
    shown = json.loads(ok(await jpu(server, "alice", "show", f"{p}_2", "--json")))
    assert shown["id"] == f"{array}_2"
    events = json.loads(ok(await jpu(server, "alice", "events", f"{p}_2", "--json")))
    assert events["job_id"] == f"{array}_2"
    whole = json.loads(ok(await jpu(server, "alice", "show", p, "--json")))  # the array
    assert whole["id"] == array and len(whole["tasks"]) == 8
    out = ok(await jpu(server, "alice", "hold", f"{p}_[2-4,7]"))
    assert out.count(" held ") == 4 and f"Job {array}_7 held" in out
    out = ok(await jpu(server, "alice", "release", f"{p}_3"))
    assert f"Job {array}_3 released" in out
    out = ok(await jpu(server, "alice", "cancel", f"{p}_[0-1]"))
    assert out.startswith("Cancel requested for 2 jobs:") and f"{array}_1" in out
    rc, _, err = await jpu(server, "alice", "show", f"{p}_[0-1]")
    assert rc == 1 and "a range only for cancel, hold and release" in err

    # a single job: hold and release by prefix (they needed the whole id before)
    single = (await api.submit("alice", job_body())).json()["id"]
    assert f"Job {single} held" in ok(await jpu(server, "alice", "hold", single[:9]))
    assert f"Job {single} released" in ok(await jpu(server, "alice", "release", single[:9]))


async def test_U8_a_job_answers_the_same_whole_or_as_a_prefix(server: str, api: Api) -> None:
    job = (await api.submit("alice", job_body())).json()["id"]
    for given in (job, job[:12], job[:8]):  # another lab's job: forbidden, however given
        failed(await jpu(server, "carol", "show", given), "FORBIDDEN")
        r = await api.client.post(f"/v1/jobs/{given}/hold", headers=bearer("carol"))
        assert r.status_code == 403, r.text
    # shorter prefixes only ever find the caller's own jobs: no listing other labs' ids
    failed(await jpu(server, "carol", "show", job[:5]), "NOT_FOUND")
    assert f"JobId: {job}" in ok(await jpu(server, "alice", "show", job[:5]))
    failed(await jpu(server, "carol", "show", "ffffffffffff"), "NOT_FOUND")
