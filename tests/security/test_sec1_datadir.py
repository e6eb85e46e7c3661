"""SPEC SEC1 live: the platform's data directory is not enterable by job accounts.

`python -m jpu.stack run` as root (what `make run` does) with its own embedded NATS and
PostgreSQL, on a data dir an earlier run (before SEC1) left 0755 with its PostgreSQL cluster and
job outputs inside: at start the data dir becomes 0700; the cluster and the outputs are carried
over to /var/lib/jpu-share (jpu.stack.private), with their data; a job's account cannot list or
enter the data dir, yet a job still runs in its JOB_OUTPUT_DIR and its output is served by the
API and `jpu logs`."""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from jpu.embedded.postgres import EmbeddedPostgres
from jpu.stack import discover, private
from jpu.testing.cli import jpu_raw, ok_raw
from jpu.testing.stack_process import StackProcess, remove_data_dir, world_searchable_tmpdir
from jpu.testing.unavailable import needs_root

needs_root("the stack runs as root and its jobs as the users' own accounts")
MARK = "carried over from an earlier make run"


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """`<checkout>/.jpu` as an earlier run left it: 0755."""
    base = world_searchable_tmpdir("jpu-test-sec1-datadir-")
    d = base / ".jpu"
    d.mkdir(mode=0o755)
    try:
        yield d
    finally:
        remove_data_dir(d)
        shutil.rmtree(base, ignore_errors=True)


async def earlier_cluster(pg_dir: Path) -> None:
    """A cluster in `<data_dir>/pg` as the stack kept it before SEC1, with a row in it."""
    pg = EmbeddedPostgres(pg_dir, durable=False)
    pg.start()
    try:
        conn = await asyncpg.connect(pg.dsn())
        try:
            await conn.execute("CREATE TABLE sec1_mark (what text)")
            await conn.execute("INSERT INTO sec1_mark VALUES ($1)", MARK)
        finally:
            await conn.close()
    finally:
        pg.stop()


def as_account(account: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["setpriv", f"--reuid={account}", f"--regid={account}", "--init-groups", "--", *argv],
        capture_output=True, text=True, timeout=30, cwd="/",
    )  # fmt: skip


async def test_sec1_the_data_dir_is_not_enterable_by_job_accounts(data_dir: Path) -> None:
    await earlier_cluster(data_dir / "pg")
    old_output = data_dir / "outputs" / "earlier-job" / "1"
    old_output.mkdir(parents=True)
    (old_output / "stdout").write_text("earlier\n")

    stack = StackProcess({"JPU_NATS_URL": None, "JPU_DATABASE_URL": None}, data_dir)
    try:
        stack.wait_ready()
        assert data_dir.stat().st_mode & 0o777 == 0o700

        # the earlier cluster runs from outside, with its data; nothing left behind
        pg_dir = private.outside(data_dir, "pg")
        assert (pg_dir / "pgdata" / "PG_VERSION").exists() and not (data_dir / "pg").exists()
        url = str(discover.running(data_dir)["database_url"])  # type: ignore[index]
        conn = await asyncpg.connect(url)
        try:
            assert await conn.fetchval("SELECT what FROM sec1_mark") == MARK
        finally:
            await conn.close()
        outputs = private.outside(data_dir, "outputs")
        assert (outputs / "earlier-job" / "1" / "stdout").read_text() == "earlier\n"
        assert not (data_dir / "outputs").exists()

        # a job runs in its JOB_OUTPUT_DIR, outside the data dir, and its output is served
        auth = {"Authorization": f"Bearer {stack.token('bcg-alice')}"}
        body = {"name": "sec1", "command": "pwd; echo hello-sec1", "num_gpus": 1}
        async with httpx.AsyncClient(base_url=stack.url, headers=auth, timeout=10) as http:
            r = await http.post("/v1/jobs", json=body)
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            for _ in range(300):
                job = (await http.get(f"/v1/jobs/{job_id}")).json()
                if job["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"):
                    break
                await asyncio.sleep(0.1)
            assert job["state"] == "COMPLETED", job
            out_dir = Path(job["output_dir"])
            assert out_dir.parent.parent == outputs, job
            logs = (await http.get(f"/v1/jobs/{job_id}/logs")).text
        assert logs == f"{out_dir}\nhello-sec1\n", logs
        cli = ok_raw(await jpu_raw(stack.url, "bcg-alice", "logs", job_id))
        assert cli == f"{out_dir}\nhello-sec1\n".encode()

        # the job's account: its own output, yes; the data dir, no
        account = pwd.getpwuid(out_dir.stat().st_uid).pw_name
        assert account != "root"
        assert as_account(account, "cat", str(out_dir / "stdout")).returncode == 0
        for argv in (["ls", str(data_dir)], ["ls", str(data_dir / "logs")],
                     ["cat", str(data_dir / "secrets" / "nats.json")],
                     ["ls", str(pg_dir)], ["cat", str(pg_dir / "postgres.log")]):  # fmt: skip
            run = as_account(account, *argv)
            assert run.returncode != 0 and "Permission denied" in run.stderr, (argv, run)
        run = as_account(account, "sh", "-c", f"cd {data_dir}")
        assert run.returncode != 0, run
        run = as_account(account, "ls", str(outputs))  # 0711: no listing of others' job ids
        assert run.returncode != 0, run
    finally:
        assert stack.stop() == 0, stack.log_tail()
    assert (pg_dir / "pgdata" / "PG_VERSION").exists()  # kept for the next run
    assert not os.path.exists(data_dir / "pg")
