"""What a Slurm user's trial found in the CLI's answers (issue 28 item 7), through the real CLI
(its own process) and the real gateway (HTTP, intake and the projections on real NATS
JetStream + PostgreSQL). Every user's limit is 0 here (test_api_support): jobs stay in their
personal queues, and no dispatcher runs, so a cancelled queued job stays CANCELLING in the
database for the whole test."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from jpu.domain.dependencies import NEVER_SATISFIED
from jpu.events import JobEnded
from jpu.testing.api import Api, bearer, job_body
from jpu.testing.cli import failed, jpu, ok
from jpu.testing.inprocess import serve_http


@pytest_asyncio.fixture
async def server(api: Api) -> AsyncIterator[str]:
    async with serve_http(api.app) as url:
        yield url


async def test_Q9_release_never_says_reason_None(server: str, api: Api) -> None:
    job = (await api.submit("alice", job_body())).json()["id"]
    assert f"Job {job} held" in ok(await jpu(server, "alice", "hold", job))
    out = ok(await jpu(server, "alice", "release", job))
    assert f"Job {job} released" in out and "None" not in out, out


async def test_X5_cancel_of_a_queued_job_says_cancelled_not_cancelling(
    server: str, api: Api
) -> None:
    job = (await api.submit("alice", job_body())).json()["id"]
    out = ok(await jpu(server, "alice", "cancel", job))
    assert out.strip() == f"Cancelled job {job} (it had not started)", out
    assert "CANCELLING" not in out and "SIGTERM" not in out


async def test_Q7_cancel_of_an_array_counts_only_the_tasks_it_cancelled(
    server: str, api: Api
) -> None:
    r = await api.submit("alice", job_body(array="0-3"))
    assert r.status_code == 201, r.text
    array = r.json()["id"]
    ok(await jpu(server, "alice", "cancel", f"{array}_1"))  # cancelled before: not counted again
    out = ok(await jpu(server, "alice", "cancel", array))
    assert out.strip() == (
        f"Cancel requested for array {array} (3 of 4 tasks); the others had ended or were "
        "being cancelled already"
    ), out


async def test_U1_dash_n_is_the_job_name_in_every_command(server: str, api: Api) -> None:
    sweep = [(await api.submit("bob", job_body(name="sweep"))).json()["id"] for _ in range(2)]
    other = (await api.submit("bob", job_body(name="other"))).json()["id"]
    for cmd in (["jobs"], ["queue"], ["squeue"]):  # as squeue -n and scancel -n
        out = ok(await jpu(server, "bob", *cmd, "-n", "sweep"))
        assert all(j in out for j in sweep) and other not in out, (cmd, out)
    one = json.loads(ok(await jpu(server, "bob", "--json", "jobs", "-n", "sweep", "--limit", "1")))
    assert [j["id"] for j in one["jobs"]] == sweep[-1:]  # newest first, the count is --limit
    out = ok(await jpu(server, "bob", "cancel", "-n", "other"))
    assert other in out and not any(j in out for j in sweep)


async def test_Q8_a_job_whose_dependency_can_never_be_met_says_so_in_jobs_and_why(
    server: str, api: Api
) -> None:
    parent = (await api.submit("bob", job_body(name="prep"))).json()["id"]
    r = await api.submit("bob", job_body(name="train", dependency=f"afterok:{parent}"))
    assert r.status_code == 201, r.text
    child = r.json()["id"]
    # the parent fails (written as the services would: it never ran here); intake then ends
    # the child CANCELLED, DEPENDENCY_NEVER_SATISFIED (Q8)
    await api.append(JobEnded(**api.kw(), job_id=parent, attempt=0, state="FAILED"))
    deadline = asyncio.get_running_loop().time() + 15
    while True:
        body = (await api.client.get(f"/v1/jobs/{child}", headers=bearer("bob"))).json()
        if body["state"] == "CANCELLED":
            break
        assert asyncio.get_running_loop().time() < deadline, body
        await asyncio.sleep(0.1)
    assert body["reason"] == NEVER_SATISFIED
    rows = ok(await jpu(server, "bob", "jobs")).splitlines()
    row = next(line for line in rows if line.startswith(child))
    assert "CANCELLED(DependencyNeverSatisfied)" in row.split(), row
    queue = ok(await jpu(server, "bob", "queue"))  # it left the queue at once: said, not gone
    assert "dependency can never be met" in queue, queue
    row = next(line for line in queue.splitlines() if line.startswith(child))
    assert "CANCELLED(DependencyNeverSatisfied)" in row.split(), row
    assert child not in ok(await jpu(server, "alice", "queue"))  # another user's: not hers
    why = ok(await jpu(server, "bob", "why", child))
    assert f"job {parent} it depends on ended FAILED, so its dependency can never be met" in why


async def test_U1_submit_refusals_speak_the_users_flags_and_units(
    server: str, api: Api, tmp_path: Path
) -> None:
    """`--time` in sbatch's form, not `time_limit_s` in seconds; the script by its name and
    size, not `command`."""
    err = failed(await jpu(server, "alice", "submit", "--wrap", "x", "--time", "400-00:00:00"),
                 "VALIDATION_ERROR")  # fmt: skip
    assert "--time: must be positive and at most 365-00:00:00" in err, err
    assert "time_limit_s" not in err and "31536000" not in err
    big = tmp_path / "huge.sh"
    big.write_text("#!/bin/bash\n" + "# padding\n" * 8000)  # 80 KB: over the 64 KiB limit
    err = failed(await jpu(server, "alice", "submit", str(big)), "VALIDATION_ERROR")
    assert "huge.sh (78.1 KiB): must be at most 64 KiB" in err, err
    assert "command" not in err
