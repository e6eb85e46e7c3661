"""`jpu logs` and `jpu submit` from a project folder, as a user runs them (a real process) against
the whole stack over real HTTP (SPEC U1, U5): raw output bytes of any attempt, `--stderr`,
`--follow` until the attempt ends, `--json`; one-line errors; jobs that run where they were
submitted from (like sbatch) and `jpu show` saying where."""

from __future__ import annotations

import asyncio
import json
import os
import shutil

import asyncpg

from jpu.testing.cli import failed_raw as failed
from jpu.testing.cli import jpu_raw as jpu
from jpu.testing.cli import ok_raw as ok
from jpu.testing.cli import raw_argv, raw_env
from jpu.testing.stack import ended, logs_stack, wait_job
from jpu.testing.stack_process import world_searchable_tmpdir

RAW = """if [ "$JOB_ATTEMPT" = 1 ]; then
  printf 'a1 \\377\\n'
  echo "torch.OutOfMemoryError: CUDA out of memory" >&2
  exit 1
fi
printf 'a2 \\377\\n'
echo err2 >&2
"""


async def test_U5_jpu_logs_prints_the_raw_output_of_any_attempt(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        url = str(s.client.base_url).rstrip("/")
        job = await s.submit("bcg-alice", RAW)
        await wait_job(s, "bcg-alice", job, lambda j: ended(j) and j["attempt"] == 2)
        assert ok(await jpu(url, "bcg-alice", "logs", job)) == b"a2 \xff\n"  # bytes as written
        assert ok(await jpu(url, "bcg-alice", "logs", job, "--stderr")) == b"err2\n"
        assert ok(await jpu(url, "bcg-alice", "logs", job, "--attempt", "1")) == b"a1 \xff\n"
        first_err = ok(await jpu(url, "bcg-alice", "logs", job, "--attempt", "1", "--stderr"))
        assert b"CUDA out of memory" in first_err
        data = json.loads(ok(await jpu(url, "bcg-alice", "logs", job[:10], "--json")))
        assert data == {
            "job_id": job,
            "attempt": 2,
            "stream": "stdout",
            "offset": 0,
            "next_offset": 5,
            "size": 5,
            "ended": True,
            "output": "a2 \ufffd\n",
        }  # fmt: skip (a unique prefix of the id: the answer names the job in full)
        assert ok(await jpu(url, "bcg-alice", "logs", job, "-f")) == b"a2 \xff\n"  # ended: at once

        failed(await jpu(url, "bcg-alice", "logs", "no-such-job"), "NOT_FOUND")
        err = failed(await jpu(url, "bcg-alice", "logs", job, "--attempt", "3"), "NOT_FOUND")
        assert "no attempt 3" in err
        failed(await jpu(url, "kdg-carol", "logs", job), "FORBIDDEN")  # another lab's member
        rc, out, err = await jpu(url, "bcg-alice", "logs", job, "--json", "--follow")
        assert rc == 1 and out == b"" and "--json" in err and err.count("\n") == 1


async def test_U5_jpu_logs_follow_prints_until_the_attempt_ends(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    gates = world_searchable_tmpdir("jpu-cli-gate-")
    gate = gates / "go"
    script = f"echo first\nwhile [ ! -e {gate} ]; do sleep 0.05; done\necho second\n"
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            url = str(s.client.base_url).rstrip("/")
            job = await s.submit("bcg-alice", script)
            proc = await asyncio.create_subprocess_exec(
                *raw_argv("logs", "-f", job), env=raw_env(url, "bcg-alice"),
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            assert proc.stdout is not None
            first = await asyncio.wait_for(proc.stdout.readline(), 30)
            assert first == b"first\n"  # printed while the job runs (it waits for the gate)
            assert proc.returncode is None
            gate.touch()
            rest, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0, err
            assert rest == b"second\n"  # and it ended by itself with the attempt
            assert (await wait_job(s, "bcg-alice", job, ended, 5))["state"] == "COMPLETED"
    finally:
        shutil.rmtree(gates, ignore_errors=True)


async def test_U5_jpu_submit_runs_in_the_submit_directory_and_show_says_where(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    project = world_searchable_tmpdir("jpu-cli-project-")
    (project / "hello.py").write_text('import os\nprint("hello from", os.getcwd())\n')
    (project / "hello.py").chmod(0o644)
    (project / "sub").mkdir(mode=0o755)
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            url = str(s.client.base_url).rstrip("/")
            # SPEC U5: `python3 hello.py` from a project folder finds hello.py
            run = await jpu(url, "bcg-bob", "submit", "--wrap", "python3 hello.py", "--json",
                            cwd=project)  # fmt: skip
            job = json.loads(ok(run))
            if os.getuid() == 0:  # U5: root's 0755 folder, the job runs as jpu-bcg-bob
                assert run[2] == f"jpu submit: warning: {job['warnings'][0]['message']}\n"
                assert "cannot write" in run[2] and "setfacl -m u:jpu-bcg-bob:rwx" in run[2]
            assert job["chdir"] == job["workdir"] == str(project)
            done = await wait_job(s, "bcg-bob", job["id"], ended)
            assert done["state"] == "COMPLETED", done
            out = ok(await jpu(url, "bcg-bob", "logs", job["id"]))
            assert out == f"hello from {project}\n".encode()
            shown = ok(await jpu(url, "bcg-bob", "show", job["id"])).decode()
            assert f"WorkDir: {project}" in shown and f"OutputDir: {done['output_dir']}" in shown
            assert f"Account: {done['account']}" in shown  # X4: the Unix account it ran as

            # --chdir / -D: another directory, relative to the current one like sbatch's
            other = json.loads(ok(await jpu(url, "bcg-bob", "submit", "-D", "sub", "--wrap",
                                            "pwd", "--json", cwd=project)))  # fmt: skip
            assert other["chdir"] == str(project / "sub")
            await wait_job(s, "bcg-bob", other["id"], ended)
            assert ok(await jpu(url, "bcg-bob", "logs", other["id"])) == f"{project}/sub\n".encode()
    finally:
        shutil.rmtree(project, ignore_errors=True)
