"""SPEC U6/U7 through the whole stack over real HTTP (NATS JetStream, PostgreSQL, gateway,
intake, dispatcher, slurm-agent on the local backend): a submit's `output`/`signal` reach the
job, which writes its -o file in its working directory and traps the signal before its limit."""

from __future__ import annotations

import shutil

import asyncpg

from jpu.testing.api import assert_error, bearer
from jpu.testing.stack import ended, logs_stack, wait_job
from jpu.testing.stack_process import world_searchable_tmpdir


async def test_U6_U7_submit_output_and_signal_are_honoured_by_the_running_job(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    project = world_searchable_tmpdir("jpu-u6-project-")
    project.chmod(0o1777)  # the job's account writes its -o file here
    script = (
        "trap 'echo checkpoint; exit 0' USR1\n"
        'echo "id=$SLURM_JOB_ID name=$SLURM_JOB_NAME"\n'
        "sleep 60 & wait\n"
    )
    body = {
        "name": "ck", "command": script, "num_gpus": 1, "chdir": str(project),
        "output": "out_%j.txt", "signal": "B:USR1@4", "time_limit_s": 8,
    }  # fmt: skip
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            r = await s.client.post("/v1/jobs", json=body, headers=bearer("bcg-alice"))
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            done = await wait_job(s, "bcg-alice", job_id, ended)
            if done["state"] != "COMPLETED":  # the trap ended it before the limit
                out = await s.client.get(f"/v1/jobs/{job_id}/logs", headers=bearer("bcg-alice"))
                raise AssertionError((done["state"], done.get("reason"), out.text))
            text = (project / f"out_{job_id}.txt").read_text()
            assert text == f"id={job_id} name=ck\ncheckpoint\n"

            r = await s.client.post(
                "/v1/jobs", json={**body, "signal": "USR1@soon"}, headers=bearer("bcg-alice")
            )
            err = assert_error(r, 422, "VALIDATION_ERROR")
            assert "signal" in str(err), err
    finally:
        shutil.rmtree(project, ignore_errors=True)
