"""`jpu files` and `jpu get` as a user runs them (real processes) against the whole stack over
real HTTP (SPEC §8 `GET /v1/jobs/{id}/files`, U1): a table of what the job wrote, `--json`, a
download into the current directory or `-o`, a resumed partial download, one-line refusals."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import asyncpg

from jpu.testing.cli import failed_raw as failed
from jpu.testing.cli import jpu_raw as jpu
from jpu.testing.cli import ok_raw as ok
from jpu.testing.stack import NUMBERS, ended, logs_stack, wait_job

WRITER = """mkdir -p "$JOB_OUTPUT_DIR/results"
seq 1 20000 > "$JOB_OUTPUT_DIR/results/numbers.txt"
printf 'step,loss\\n1,0.5\\n' > "$JOB_OUTPUT_DIR/metrics.csv"
ln -s /etc/shadow "$JOB_OUTPUT_DIR/shadow"
"""


async def test_files_jpu_files_lists_and_jpu_get_downloads_and_resumes(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    here = Path(tempfile.mkdtemp(prefix="jpu-get-"))
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            url = str(s.client.base_url).rstrip("/")
            job = await s.submit("bcg-alice", WRITER)
            await wait_job(s, "bcg-alice", job, ended)

            text = ok(await jpu(url, "bcg-alice", "files", job)).decode()
            lines = text.splitlines()
            assert lines[0] == f"{job} attempt 1: ." and lines[1].split() == [
                "NAME", "TYPE", "SIZE", "MODIFIED",
            ]  # fmt: skip
            rows = {ln.split()[0]: ln.split() for ln in lines[2:]}
            assert rows["metrics.csv"][1:3] == ["file", "16"]
            assert rows["results/"][1:3] == ["dir", "-"] and rows["shadow@"][1] == "symlink"
            sub = ok(await jpu(url, "bcg-alice", "files", job, "results", "--json"))
            body = json.loads(sub)
            assert body["path"] == "results" and body["attempt"] == 1
            assert [(e["name"], e["size"]) for e in body["entries"]] == [
                ("numbers.txt", len(NUMBERS))
            ]

            # into the current directory under its own name, with the job's mtime
            said = ok(await jpu(url, "bcg-alice", "get", job, "results/numbers.txt", cwd=here))
            got = here / "numbers.txt"
            assert got.read_bytes() == NUMBERS
            assert said.decode() == f"results/numbers.txt -> numbers.txt ({len(NUMBERS):,} bytes)\n"
            assert got.stat().st_mtime == body["entries"][0]["mtime"]
            # -o FILE; -o - to stdout
            ok(await jpu(url, "bcg-alice", "get", job, "metrics.csv", "-o", str(here / "m.csv")))
            assert (here / "m.csv").read_bytes() == b"step,loss\n1,0.5\n"
            assert ok(await jpu(url, "bcg-alice", "get", job, "metrics.csv", "-o", "-")) == (
                b"step,loss\n1,0.5\n"
            )
            # --continue: a partial local file is completed with a Range request
            got.write_bytes(NUMBERS[:1000])
            args = ("get", job, "results/numbers.txt", "--continue", "--json")
            done = json.loads(ok(await jpu(url, "bcg-alice", *args, cwd=here)))
            assert done["resumed_at"] == 1000 and done["size"] == len(NUMBERS)
            assert got.read_bytes() == NUMBERS
            again = json.loads(ok(await jpu(url, "bcg-alice", *args, cwd=here)))  # complete
            assert again["resumed_at"] == len(NUMBERS) and got.read_bytes() == NUMBERS

            # refusals: one line naming the field, nothing written
            before = sorted(os.listdir(here))
            get = ("get", job)
            run = await jpu(url, "bcg-alice", *get, "../x", cwd=here)
            assert "path" in (err := failed(run, "VALIDATION_ERROR", "get")) and "'..'" in err
            run = await jpu(url, "bcg-alice", *get, "shadow", cwd=here)
            assert "symbolic link" in failed(run, "VALIDATION_ERROR", "get")
            run = await jpu(url, "kdg-carol", *get, "metrics.csv", cwd=here)
            failed(run, "FORBIDDEN", "get")
            failed(await jpu(url, "kdg-carol", "files", job), "FORBIDDEN", "files")
            failed(await jpu(url, "bcg-alice", "files", job, "nope"), "NOT_FOUND", "files")
            assert sorted(os.listdir(here)) == before
            for command in ("files", "get"):
                rc, out, _ = await jpu(url, "bcg-alice", command, "--help")
                assert rc == 0 and b"JOB_OUTPUT_DIR" in out, out
    finally:
        shutil.rmtree(here, ignore_errors=True)
