"""A lab member's daily loop with `jpu` (a real process) against the whole stack over real HTTP
(SPEC U5): real NATS JetStream + PostgreSQL, the gateway under uvicorn, intake,
dispatcher, accounting and the slurm-agent on the local backend (jobs are real processes).

The cluster (test_api_logs): a 2-GPU `small` tier (12 GB, tried first) and a 2-GPU `big` one
(24 GB). Jobs wait on a gate file the test creates, so "running" and "waiting" are states the
test holds, not races."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg

from jpu.testing.cli import jpu, ok
from jpu.testing.stack import OOM_ON_ATTEMPT_1, Stack, ended, logs_stack, wait_job
from jpu.testing.stack_process import world_searchable_tmpdir


@contextlib.asynccontextmanager
async def daily(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> AsyncIterator[tuple[Stack, str, Path, Path]]:
    """The stack, its URL, a project folder and the gate file its jobs wait for."""
    project = world_searchable_tmpdir("jpu-cli-daily-")
    gate = project / "go"
    try:
        async with logs_stack(nats_url, pool, pg_dsn) as s:
            yield s, str(s.client.base_url).rstrip("/"), project, gate
    finally:
        shutil.rmtree(project, ignore_errors=True)


def held(gate: Path) -> str:
    return f"while [ ! -e {gate} ]; do sleep 0.05; done\necho done\n"


def rows(table: str) -> dict[str, list[str]]:
    """A table's rows by their JOBID (second column in `jpu queue`)."""
    return {line.split()[1]: line.split() for line in table.splitlines()[1:] if line.strip()}


async def test_U1_queue_shows_running_jobs_filters_and_submit_says_held_only_when_held(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with daily(nats_url, pool, pg_dsn) as (s, url, project, gate):
        # under the limit (3): "Submitted job ID", no "(PERSONAL_QUEUE_WAIT)" that reads as held
        running = []
        for i in range(3):
            out = ok(await jpu(url, "bcg-bob", "submit", "--wrap", held(gate), "-J", f"r{i}",
                               cwd=project))  # fmt: skip
            assert out.startswith("Submitted job ") and "queued" not in out, out
            running.append(out.split()[2])
        for job_id in running:
            await wait_job(s, "bcg-bob", job_id, lambda j: j["state"] == "RUNNING")
        out = ok(await jpu(url, "bcg-bob", "submit", "--wrap", "true", "-J", "fourth", cwd=project))
        fourth = out.split()[2]
        assert out.strip().endswith(
            "— queued (waiting for a free slot: 3 of 3 in use; it moves to the global queue "
            "when one of your jobs ends)"
        ), out
        await asyncio.sleep(1.1)  # so that the running jobs have run a second

        # like squeue: the running jobs too, with their run time and node
        table = ok(await jpu(url, "kdg-carol", "queue", cwd=project))
        assert table.splitlines()[0].split()[8:] == [
            "TIME", "LAB_USAGE(CHARGED)", "ACCRUED(UNCHARGED)", "NODELIST(REASON)",
        ]  # fmt: skip
        by_id = rows(table)
        for job_id in running:
            row = by_id[job_id]
            assert row[7] == "RUNNING" and row[8] != "00:00:00", row
            assert row[-1].startswith(("n-small[small:", "n-big[big:")), row
        assert by_id[fourth][7] == "PERSONAL_QUEUE_WAIT"
        assert by_id[fourth][-1] == "(ConcurrencyLimit)"

        # filters: --me, -u, --state (squeue's short names too), --lab; --json either side
        assert set(rows(ok(await jpu(url, "bcg-bob", "queue", "--me", cwd=project)))) == {
            *running, fourth,
        }  # fmt: skip
        assert rows(ok(await jpu(url, "kdg-carol", "queue", "--me", cwd=project))) == {}
        mine = json.loads(ok(await jpu(url, "kdg-carol", "--json", "queue", "-u", "bcg-bob",
                                       "--state", "R", cwd=project)))  # fmt: skip
        assert {e["job_id"] for e in mine["running"]} == set(running) and mine["queue"] == []
        assert all(e["elapsed_s"] >= 1 for e in mine["running"])
        pending = json.loads(ok(await jpu(url, "bcg-bob", "queue", "--state", "PD", "--json",
                                          cwd=project)))  # fmt: skip
        assert [e["job_id"] for e in pending["queue"]] == [fourth] and pending["running"] == []
        assert rows(ok(await jpu(url, "bcg-bob", "queue", "--lab", "KDG", cwd=project))) == {}

        # --start: the dispatcher's estimated starts as a column (U4; "-" until one is computed)
        rc, out, _err = await jpu(url, "bcg-bob", "queue", "--start", cwd=project)
        assert rc == 0 and out.splitlines()[0].split()[9] == "ESTIMATED_START", out
        assert fourth in out

        # RunTime while it runs (from started_at, by the gateway's clock)
        shown = ok(await jpu(url, "bcg-bob", "show", running[0], cwd=project))
        run_time = next(line for line in shown.splitlines() if "RunTime:" in line)
        assert run_time.split()[-1] not in ("00:00:00", "-"), shown
        job = json.loads(ok(await jpu(url, "bcg-bob", "show", running[0], "--json", cwd=project)))
        assert job["elapsed_s"] >= 1 and [a["state"] for a in job["attempts"]] == ["RUNNING"]

        gate.touch()
        for job_id in [*running, fourth]:
            await wait_job(s, "bcg-bob", job_id, ended)
        # like sacct: state, exit code, attempts, GPU-hours, usage charged, elapsed
        history = json.loads(ok(await jpu(url, "bcg-bob", "history", "--json", cwd=project)))
        assert {j["id"] for j in history["jobs"]} == {*running, fourth}
        done = next(j for j in history["jobs"] if j["id"] == running[0])
        assert done["state"] == "COMPLETED" and done["exit_code"] == 0 and done["attempt"] == 1
        assert done["gpu_seconds"] > 1 and done["elapsed_s"] > 1
        table = ok(await jpu(url, "bcg-bob", "history", cwd=project))
        header, *lines = table.splitlines()
        assert header.split()[-4:] == ["SUBMITTED", "ELAPSED", "GPU_HOURS", "USAGE"]
        assert sum(line.split()[0] in running for line in lines) == 3


async def test_X8_show_explains_the_oom_retry_while_it_waits_and_after(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str
) -> None:
    async with daily(nats_url, pool, pg_dsn) as (s, url, project, gate):
        # both big GPUs busy, so the retry (needing more than small's 12 GB) has to wait
        for i in range(2):
            ok(await jpu(url, "kdg-carol", "submit", "--wrap", held(gate), "--tier", "big",
                         "-J", f"busy{i}", cwd=project))  # fmt: skip
        script = project / "train.sh"
        script.write_text(OOM_ON_ATTEMPT_1)
        out = ok(await jpu(url, "bcg-alice", "submit", str(script), cwd=project))
        job_id = out.split()[2]
        await wait_job(
            s, "bcg-alice", job_id, lambda j: (j["attempt"], j["state"]) == (2, "GLOBAL_QUEUE_WAIT")
        )

        shown = ok(await jpu(url, "bcg-alice", "show", job_id, cwd=project))
        assert (
            "OOM retry: attempt 1 ran out of GPU memory on small (12 GB); retrying on a GPU "
            "with more than 12 GB." in shown
        ), shown
        assert "MinVramGB: 13 (raised by the OOM retry; you set none)" in shown
        assert "Attempt: 2 of at most 3" in shown
        assert "ExitCode: -" in shown  # attempt 2 has not run yet: not attempt 1's exit code
        attempts = shown.split("--- attempts ---\n")[1].split("\n--- command")[0].splitlines()
        assert attempts[1].split()[:8] == ["1", "FAILED", "small", "12", "GB", "n-small", "0", "1"]
        assert attempts[2].split()[:2] == ["2", "WAITING"]
        job = json.loads(ok(await jpu(url, "bcg-alice", "show", job_id, "--json", cwd=project)))
        assert job["min_vram_gb"] == 13 and job["min_vram_gb_requested"] is None
        assert [a["retry"] for a in job["attempts"]] == [
            {"decision": "scheduled", "min_vram_gb": 13, "reason": None, "needed_vram_gb": None},
            None,
        ]

        gate.touch()  # the big GPUs free up: attempt 2 runs there and completes
        await wait_job(s, "bcg-alice", job_id, ended)
        shown = ok(await jpu(url, "bcg-alice", "show", job_id, cwd=project))
        assert (
            "OOM retry: attempt 1 ran out of GPU memory on small (12 GB); retried as attempt 2 "
            "on big (24 GB)." in shown
        ), shown
        assert "State: COMPLETED" in shown and "ExitCode: 0" in shown

        # on the biggest GPU there is nothing bigger: the job fails, and says why
        out = ok(await jpu(url, "bcg-alice", "submit", str(script), "--tier", "big", cwd=project))
        failed = await wait_job(s, "bcg-alice", out.split()[2], ended)
        assert failed["state"] == "FAILED" and failed["reason"] == "OOM"
        shown = ok(await jpu(url, "bcg-alice", "show", failed["id"], cwd=project))
        assert (
            "OOM retry: attempt 1 ran out of GPU memory on big (24 GB); no GPU with more than "
            "24 GB exists here, so the job failed." in shown
        ), shown
