"""SPEC §8 `GET /v1/jobs/{id}/logs` and U5 (a job runs in its chdir), over real HTTP against the
whole stack in one process: real NATS JetStream + PostgreSQL, the gateway under uvicorn, intake,
dispatcher, accounting and the slurm-agent on the local backend (jobs are real processes of the
users' own accounts, writing JOB_OUTPUT_DIR/stdout and stderr)."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from jpu.backends import joblogs
from jpu.testing.api import add_lab_admins, assert_error, bearer
from jpu.testing.stack import OOM_ON_ATTEMPT_1, Stack, ended, logs_stack, wait_job
from jpu.testing.stack_process import world_searchable_tmpdir
from jpu.testing.unavailable import needs_root


async def logs(s: Stack, user: str, job_id: str, **params: Any) -> httpx.Response:
    return await s.client.get(f"/v1/jobs/{job_id}/logs", params=params, headers=bearer(user))


async def test_U5_logs_of_attempt_1_stdout_stderr_and_byte_ranges(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        job = await s.submit("bcg-alice", "printf 'hello, world\\n'; printf 'oops\\n' >&2")
        done = await wait_job(s, "bcg-alice", job, ended)
        assert done["state"] == "COMPLETED", done
        r = await logs(s, "bcg-alice", job)  # defaults: the latest attempt's stdout
        assert r.status_code == 200 and r.content == b"hello, world\n", r.text
        assert r.headers["content-type"].startswith("text/plain")
        h = r.headers
        assert (h["jpu-log-attempt"], h["jpu-log-stream"], h["jpu-log-ended"]) == (
            "1", "stdout", "true",
        )  # fmt: skip
        assert (h["jpu-log-start"], h["jpu-log-end"], h["jpu-log-size"]) == ("0", "13", "13")
        err = await logs(s, "bcg-alice", job, stream="stderr", attempt=1)
        assert err.content == b"oops\n" and err.headers["jpu-log-stream"] == "stderr"

        # a byte range: offset/limit, from the end with a negative offset, past the end
        part = await logs(s, "bcg-alice", job, offset=7, limit=5)
        assert part.content == b"world" and part.headers["jpu-log-start"] == "7"
        assert part.headers["jpu-log-end"] == "12" and part.headers["jpu-log-size"] == "13"
        tail = await logs(s, "bcg-alice", job, offset=-6)
        assert tail.content == b"world\n" and tail.headers["jpu-log-start"] == "7"
        past = await logs(s, "bcg-alice", job, offset=100)
        assert past.status_code == 200 and past.content == b""
        assert past.headers["jpu-log-start"] == past.headers["jpu-log-end"] == "100"
        assert_error(await logs(s, "bcg-alice", job, limit=0), 422, "VALIDATION_ERROR")
        assert_error(await logs(s, "bcg-alice", job, stream="both"), 422, "VALIDATION_ERROR")
        # the job says where it ran and where its output is (U5, X2)
        assert done["chdir"] is None and done["workdir"] == done["output_dir"]
        assert done["output_dir"] == str(joblogs.attempt_dir(joblogs.output_root(s.config), job, 1))


async def test_U5_logs_of_an_oom_retried_attempt_2_and_of_its_attempt_1(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        job = await s.submit("bcg-bob", OOM_ON_ATTEMPT_1)
        done = await wait_job(s, "bcg-bob", job, lambda j: ended(j) and j["attempt"] == 2)
        assert done["state"] == "COMPLETED" and done["placement"]["tier"] == "big", done
        latest = await logs(s, "bcg-bob", job)  # the latest attempt: 2
        assert latest.headers["jpu-log-attempt"] == "2"
        assert latest.content == b"attempt 2 out\n"
        assert (await logs(s, "bcg-bob", job, stream="stderr")).content == b"attempt 2 err\n"
        first = await logs(s, "bcg-bob", job, attempt=1)
        assert first.content == b"attempt 1 out\n" and first.headers["jpu-log-ended"] == "true"
        first_err = (await logs(s, "bcg-bob", job, attempt=1, stream="stderr")).text
        assert first_err.startswith("attempt 1 err\n") and "CUDA out of memory" in first_err
        err = assert_error(await logs(s, "bcg-bob", job, attempt=3), 404, "NOT_FOUND")
        assert "no attempt 3" in err["message"] and err["details"]["latest_attempt"] == 2


async def test_U5_follow_streams_output_appended_later_and_ends_with_the_attempt(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    gates = world_searchable_tmpdir("jpu-logs-gate-")
    gate = gates / "go"
    script = f"echo first\nwhile [ ! -e {gate} ]; do sleep 0.05; done\necho second\nsleep 0.3\n"
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            job = await s.submit("bcg-alice", script)
            await wait_job(s, "bcg-alice", job, lambda j: j["state"] == "RUNNING")
            got = b""
            url = f"/v1/jobs/{job}/logs"
            params = {"follow": "true"}
            async with s.client.stream("GET", url, params=params, headers=bearer("bcg-alice")) as r:
                assert r.status_code == 200 and r.headers["jpu-log-start"] == "0"
                assert "jpu-log-end" not in r.headers  # unknown while it follows
                chunks = r.aiter_bytes()
                while b"first\n" not in got:
                    got += await asyncio.wait_for(anext(chunks), 20)
                state = (await s.client.get(f"/v1/jobs/{job}", headers=bearer("bcg-alice"))).json()
                assert state["state"] == "RUNNING"  # what we read came while it ran
                gate.touch()  # the job writes more, then ends
                async for chunk in chunks:  # the stream ends by itself when the attempt ends
                    got += chunk
            assert got == b"first\nsecond\n"
            done = await wait_job(s, "bcg-alice", job, ended, timeout=5)
            assert done["state"] == "COMPLETED"
            # following an attempt that is over gives what it wrote and ends at once
            again = await asyncio.wait_for(logs(s, "bcg-alice", job, follow="true"), 10)
            assert again.content == b"first\nsecond\n"
            tail = await asyncio.wait_for(logs(s, "bcg-alice", job, follow="true", offset=-7), 10)
            assert tail.content == b"second\n"
    finally:
        shutil.rmtree(gates, ignore_errors=True)


async def test_U5_logs_are_visible_to_owner_lab_admin_and_admin_only(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        await add_lab_admins(s.bus, pool)
        job = await s.submit("bcg-alice", "echo secret-output")
        await wait_job(s, "bcg-alice", job, ended)
        for who in ("bcg-alice", "bcg-lead", "admin"):
            r = await logs(s, who, job)
            assert r.status_code == 200 and r.content == b"secret-output\n", (who, r.text)
        for who in ("kdg-carol", "kdg-lead", "bcg-bob"):  # another lab; same lab, not owner
            err = assert_error(await logs(s, who, job), 403, "FORBIDDEN")
            assert err["details"] == {"job_id": job}
            assert_error(await logs(s, who, job, follow="true"), 403, "FORBIDDEN")
        assert_error(await s.client.get(f"/v1/jobs/{job}/logs"), 401, "UNAUTHENTICATED")  # no token
        err = assert_error(await logs(s, "bcg-alice", "no-such-job"), 404, "NOT_FOUND")
        assert "no-such-job" in err["message"]
        err = assert_error(await logs(s, "bcg-alice", job, attempt=2), 404, "NOT_FOUND")
        assert "no attempt 2" in err["message"] and "latest attempt is 1" in err["message"]

        # an attempt that has not started has no output yet: a clear 404 (follow would wait)
        await pool.execute("UPDATE users SET max_active_jobs = 0 WHERE name = 'osl-erin'")
        held = await s.submit("osl-erin", "echo never")
        err = assert_error(await logs(s, "osl-erin", held), 404, "NOT_FOUND")
        assert "no stdout output yet" in err["message"] and "PERSONAL_QUEUE_WAIT" in err["message"]
        assert err["details"]["attempt"] == 1 and err["details"]["state"] == "PERSONAL_QUEUE_WAIT"


def _account(user: str) -> str:
    """X4: the account the local backend runs `user`'s jobs as (jpu-<user> under root)."""
    return f"jpu-{user}" if os.getuid() == 0 else pwd.getpwuid(os.getuid()).pw_name


async def test_U5_X4_a_chdir_its_account_cannot_write_is_warned_at_submit_and_named(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    """The demo maps each user to a local account: a job whose account could not write its
    submit directory lost its checkpoint and still ended COMPLETED, exit 0 (its script ignored
    the error), and nothing had said so. Now the submit answer warns, naming the account and
    the fix, `GET /v1/jobs/{id}` names the account, and a directory it cannot even enter is
    refused (422 naming `chdir`)."""
    needs_root("the jobs must run as another account than the directory's")
    project = world_searchable_tmpdir("jpu-ckpt-project-")  # root's, 0755: enter, not write
    body = {"name": "train", "num_gpus": 1,
            "command": "echo step-1 > checkpoint.pt 2>/dev/null; echo trained"}  # fmt: skip
    account = _account("bcg-alice")
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            r = await s.client.post(
                "/v1/jobs", json={**body, "chdir": str(project)}, headers=bearer("bcg-alice")
            )
            assert r.status_code == 201, r.text
            job = r.json()
            (w,) = job["warnings"]
            assert (w["field"], w["account"]) == ("chdir", account)
            assert f"Unix account {account}, which cannot write {project}" in w["message"]
            assert f"setfacl -m u:{account}:rwx {project}" in w["message"]
            assert job["account"] == account
            done = await wait_job(s, "bcg-alice", job["id"], ended)
            assert (done["state"], done["account"]) == ("COMPLETED", account)
            assert not (project / "checkpoint.pt").exists()  # what the warning said

            # the fix the warning gives: let the account write there — no warning, it writes
            os.chown(project, pwd.getpwnam(account).pw_uid, -1)
            r = await s.client.post(
                "/v1/jobs", json={**body, "chdir": str(project)}, headers=bearer("bcg-alice")
            )
            assert r.status_code == 201 and "warnings" not in r.json(), r.text
            await wait_job(s, "bcg-alice", r.json()["id"], ended)
            assert (project / "checkpoint.pt").read_text() == "step-1\n"

            os.chown(project, 0, -1)
            (project / "private").mkdir(mode=0o700)
            r = await s.client.post(
                "/v1/jobs", json={**body, "chdir": f"{project}/private"}, headers=bearer("bcg-bob")
            )
            err = assert_error(r, 422, "VALIDATION_ERROR")
            assert err["details"] == {
                "field": "chdir", "account": _account("bcg-bob"), "chdir": f"{project}/private"
            }  # fmt: skip
            assert f"cannot enter {project}/private (mode 0700, owner uid 0" in err["message"]
    finally:
        shutil.rmtree(project, ignore_errors=True)


async def test_U5_job_runs_in_its_chdir_and_reads_a_relative_file(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    project = world_searchable_tmpdir("jpu-logs-project-")  # the job's account can enter it
    (project / "hello.py").write_text("data\n")
    (project / "hello.py").chmod(0o644)
    private = Path(project / "private")
    private.mkdir(mode=0o700)  # root's own: the job's account may not enter it
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            body = {"name": "t", "command": "cat hello.py; pwd", "num_gpus": 1}
            r = await s.client.post(
                "/v1/jobs", json={**body, "chdir": str(project)}, headers=bearer("bcg-alice")
            )
            assert r.status_code == 201, r.text
            job = r.json()
            assert job["chdir"] == job["workdir"] == str(project)
            done = await wait_job(s, "bcg-alice", job["id"], ended)
            assert done["state"] == "COMPLETED", done
            assert (await logs(s, "bcg-alice", job["id"])).text == f"data\n{project}\n"
            assert done["workdir"] == str(project) and done["output_dir"] != str(project)

            # a directory the user's account cannot enter is refused at submit where the
            # gateway sees it (the node's own check: test_isolation_local, U5)
            r = await s.client.post(
                "/v1/jobs", json={**body, "chdir": str(private)}, headers=bearer("bcg-alice")
            )
            err = assert_error(r, 422, "VALIDATION_ERROR")
            assert err["details"]["field"] == "chdir" and "cannot enter" in err["message"]

            # Q1: absolute, no NUL, at most PATH_MAX
            for bad in ("relative/dir", "/a\u0000b", "/" + "x" * 4096, 7):
                r = await s.client.post(
                    "/v1/jobs", json={**body, "chdir": bad}, headers=bearer("bcg-alice")
                )
                err = assert_error(r, 422, "VALIDATION_ERROR")
                assert "chdir" in str(err), err
    finally:
        shutil.rmtree(project, ignore_errors=True)
