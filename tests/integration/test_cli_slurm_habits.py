"""`jpu` in a Slurm user's hands (SPEC U1, U5, X5, M1): whoami, tiers, sinfo, any unique prefix
of a job id (as git takes), `submit --parsable`, `cancel` with several ids and scancel's
filters, sbatch flags refused on the command line as on an `#SBATCH` line, a closed pipe, and
the admin's maintenance message above the queue. The CLI is a real process; the gateway is
real HTTP with intake and the projections on real NATS JetStream + PostgreSQL. Every user's
limit is 0 here (test_api_support), so jobs stay in their personal queues."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from jpu.cli.rest.cancel import cancelled
from jpu.testing.api import TOKENS, Api, bearer, job_body
from jpu.testing.cli import failed, jpu, ok
from jpu.testing.inprocess import serve_http


@pytest_asyncio.fixture
async def server(api: Api) -> AsyncIterator[str]:
    async with serve_http(api.app) as url:
        yield url


async def _submit(api: Api, who: str, n: int, **over: Any) -> list[str]:
    ids = []
    for _ in range(n):
        r = await api.submit(who, job_body(**over))
        assert r.status_code == 201, r.text
        ids.append(r.json()["id"])
    return ids


async def test_U1_whoami_tiers_and_sinfo_per_tier(server: str, api: Api) -> None:
    assert ok(await jpu(server, "alice", "whoami")).strip() == (
        "bcg-alice (lab BCG, role user; 0 of 0 job slots in use, SPEC S1)"
    )
    tiers = ok(await jpu(server, "alice", "tiers")).splitlines()
    assert tiers[0].split()[:4] == ["TIER", "MODEL", "VRAM_GB", "TFLOPS"]
    assert [line.split()[0] for line in tiers[1:]] == ["rtx4090", "rtx3080ti"]  # best first
    assert "24" in tiers[1].split() and "82.6" in tiers[1].split()
    pool = (await api.client.get("/v1/placements", headers=bearer("alice"))).json()["placements"]
    by_tier = {
        t: [sum(p["capacity"] + p["down"] for p in pool if p["tier"] == t),
            sum(p["idle"] for p in pool if p["tier"] == t)]
        for t in {p["tier"] for p in pool}
    }  # fmt: skip
    rows = ok(await jpu(server, "alice", "sinfo")).splitlines()
    assert rows[0].split() == [
        "TIER", "VRAM_GB", "TFLOPS", "GPUS", "IDLE", "BUSY", "RESERVED", "DOWN", "NODES",
    ]  # fmt: skip
    for line in rows[1:]:
        tier, _vram, _tflops, gpus, idle, busy, reserved, down, _nodes = line.split()
        assert [int(gpus), int(idle)] == by_tier[tier]
        assert int(idle) + int(busy) + int(reserved) + int(down) == int(gpus)
    assert [r.split()[0] for r in rows[1:]] == ["rtx4090", "rtx3080ti"]
    for cmd in ("whoami", "tiers", "sinfo", "cancel", "show", "submit"):  # each says what it does
        help_text = ok(await jpu(server, "alice", cmd, "--help"))
        assert help_text.count("\n") > 3 and "usage: jpu " + cmd in help_text


async def test_U1_submit_parsable_prints_the_id_alone(server: str, api: Api) -> None:
    out = ok(await jpu(server, "bob", "submit", "--wrap", "true", "--parsable"))
    job_id = out.strip()
    assert out == job_id + "\n" and len(job_id) == 24
    shown = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("bob"))).json()
    assert shown["id"] == job_id


async def test_U1_any_unique_prefix_of_a_job_id_like_git(server: str, api: Api) -> None:
    ids = await _submit(api, "bob", 17)  # 17 ids over 16 hex digits: two share a first one
    first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) >= 2)
    twins = sorted(i for i in ids if i.startswith(first))
    unique = next(i for i in ids if sum(j.startswith(i[:6]) for j in ids) == 1)

    shown = ok(await jpu(server, "bob", "show", unique[:6]))
    assert f"JobId: {unique}" in shown
    events = json.loads(ok(await jpu(server, "bob", "events", unique[:6], "--json")))
    assert events["job_id"] == unique and events["events"][0]["type"] == "JobSubmitted"
    # ambiguous: one line that lists the candidates, and nothing is done
    err = failed(await jpu(server, "bob", "cancel", first), "VALIDATION_ERROR")
    assert f"'{first}' is the start of several jobs" in err
    assert all(t in err for t in twins) and "give more of the id" in err
    r = await api.client.get(f"/v1/jobs/{first}", headers=bearer("bob"))
    assert r.status_code == 422 and r.json()["error"]["details"]["candidates"]
    # only the caller's own jobs are candidates: carol sees none of bob's
    failed(await jpu(server, "carol", "show", unique[:6]), "NOT_FOUND")
    # the API takes it too (console and scripts): the cancel acts on the full id
    r = await api.client.post(f"/v1/jobs/{unique[:8]}/cancel", headers=bearer("bob"))
    assert r.status_code == 202 and r.json()["id"] == unique


async def test_X5_cancel_several_ids_and_scancel_filters_say_how_many(
    server: str, api: Api
) -> None:
    a1, a2 = await _submit(api, "bob", 2, name="sweep")
    (b1,) = await _submit(api, "bob", 1, name="other")
    (d1,) = await _submit(api, "alice", 1, name="sweep")

    out = ok(await jpu(server, "bob", "cancel", "--me", "-n", "sweep"))
    assert out.strip() in (
        f"Cancel requested for 2 jobs: {a}, {b}" for a, b in ((a1, a2), (a2, a1))
    )
    assert "SIGTERM" not in out  # neither had started: nothing to stop
    assert d1 not in out  # alice's job of the same name is not bob's
    ok_alice = await api.client.get(f"/v1/jobs/{d1}", headers=bearer("alice"))
    assert ok_alice.json()["state"] == "PERSONAL_QUEUE_WAIT"
    # filters select the caller's own jobs unless -u names another: an admin empties no queue
    assert ok(await jpu(server, "admin", "cancel", "-n", "sweep")).startswith("No job to cancel")
    out = ok(await jpu(server, "admin", "cancel", "-u", "bcg-alice", "-n", "sweep"))
    assert out.startswith(f"Cancelled job {d1} (")

    # several ids: one not his is refused on its own line, the other is cancelled
    rc, out, err = await jpu(server, "bob", "cancel", d1, b1[:10])
    assert rc == 1 and out.strip() == f"Cancelled job {b1} (it had not started)"
    assert err.count("\n") == 1 and f"jpu cancel: error: {d1}: FORBIDDEN" in err
    assert ok(await jpu(server, "bob", "cancel", "-t", "PD")).startswith("No job to cancel")
    assert "FORBIDDEN" in failed(await jpu(server, "bob", "cancel", d1), "FORBIDDEN")  # one line
    rc, _, err = await jpu(server, "bob", "cancel")
    assert rc == 1 and "give job ids, or filters" in err


async def test_X5_cancel_answer_names_the_grace_period(api: Api) -> None:
    (job_id,) = await _submit(api, "bob", 1)
    r = await api.client.post(f"/v1/jobs/{job_id}/cancel", headers=bearer("bob"))
    assert r.status_code == 202 and r.json()["cancel_grace_s"] == api.config.cancel_grace_s
    running = {"id": job_id, "state": "CANCELLING", "cancel_grace_s": 30.0, "dispatched_at": 1.0}
    assert cancelled([running]) == (
        f"Cancel requested for job {job_id} (CANCELLING); SIGTERM now, SIGKILL after 30 s "
        "(time to checkpoint)"
    )
    assert "SIGTERM" not in cancelled([{**running, "dispatched_at": None}])  # never ran


async def test_U6_sbatch_flags_on_the_command_line_as_on_their_line(server: str, api: Api) -> None:
    before = await api.pool.fetchval("SELECT count(*) FROM jobs")
    rc, out, err = await jpu(server, "alice", "submit", "--uid", "0", "--wrap", "true")
    assert rc == 1 and out == "" and "command line: --uid=0: a job runs as its submitter" in err
    rc, _, err = await jpu(server, "alice", "submit", "--mem", "999G", "--wrap", "true")
    assert rc == 1 and "command line: --mem=999G: 999G of memory: no tier brings" in err
    rc, _, err = await jpu(server, "alice", "submit", "--exclusiv", "--wrap", "true")
    assert rc == 2 and "did you mean --exclusive?" in err
    assert await api.pool.fetchval("SELECT count(*) FROM jobs") == before
    rc, out, err = await jpu(server, "alice", "submit", "-p", "gpu", "--exclusive", "-c", "4",
                             "--wrap", "true", "--parsable")  # fmt: skip
    assert rc == 0 and "command line: --exclusive: accepted and ignored" in err


async def test_U1_jobs_into_a_closed_pipe_ends_quietly(server: str, api: Api) -> None:
    """`jpu jobs | head`: the reader is gone before the table is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    env = {**os.environ, "JPU_URL": server, "JPU_TOKEN": TOKENS["alice"]}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jpu.cli.main", "jobs", env=env,
        stdout=write_end, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    os.close(write_end)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert (proc.returncode, err.decode()) == (0, "")


async def test_M1_queue_shows_the_admins_maintenance_message(server: str, api: Api) -> None:
    assert "Maintenance" not in ok(await jpu(server, "alice", "queue"))  # NORMAL: nothing said
    ok(await jpu(server, "admin", "admin", "maintenance", "start", "-m", "NFS swap until 10:00"))
    try:
        first = ok(await jpu(server, "alice", "queue")).splitlines()[0]
        assert first.startswith("Maintenance: DRAINING since ")
        assert first.endswith(": NFS swap until 10:00")
        assert json.loads(ok(await jpu(server, "alice", "queue", "--json")))  # JSON unchanged
    finally:
        ok(await jpu(server, "admin", "admin", "maintenance", "end"))


async def test_M1_sinfo_and_pool_show_maintenance_as_queue_does(server: str, api: Api) -> None:
    for command in ("sinfo", "pool"):  # NORMAL: nothing said, the table first
        first = ok(await jpu(server, "alice", command)).splitlines()[0]
        assert first.split()[0] in ("TIER", "NODE")
    ok(await jpu(server, "admin", "admin", "maintenance", "start", "-m", "NFS swap until 10:00"))
    try:
        queue = ok(await jpu(server, "alice", "queue")).splitlines()[0]
        for command, header in (("sinfo", "TIER"), ("pool", "NODE")):
            lines = ok(await jpu(server, "alice", command)).splitlines()
            assert lines[0] == queue  # the same line as the queue's: state, since, message
            assert lines[0].startswith("Maintenance: DRAINING since ")
            assert lines[0].endswith(": NFS swap until 10:00") and lines[1].split()[0] == header
            assert "Maintenance" not in ok(await jpu(server, "alice", command, "--json"))
    finally:
        ok(await jpu(server, "admin", "admin", "maintenance", "end"))
