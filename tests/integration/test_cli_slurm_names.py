"""Slurm's command names (SPEC U1, U8; issue 28 item 6): `jpu sbatch|squeue|scancel|sacct|
scontrol` with their common flags, and `jpu slurm-shims` putting them on PATH without ever
hiding a real Slurm. The CLI is a real process; the gateway is real HTTP with intake and the
projections on real NATS JetStream + PostgreSQL. Every user's limit is 0 here
(test_api_support), so jobs stay PENDING in their personal queues; a job's working directory is
a 0755 directory under /tmp (the jobs' accounts must reach it)."""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio

from jpu.events import JobEnded
from jpu.testing.api import Api, bearer, token_of
from jpu.testing.cli import jpu, ok
from jpu.testing.inprocess import serve_http
from jpu.testing.stack import ended, logs_stack, wait_job
from jpu.testing.stack_process import world_searchable_tmpdir


@pytest_asyncio.fixture
async def server(api: Api) -> AsyncIterator[str]:
    async with serve_http(api.app) as url:
        yield url


@pytest.fixture
def project() -> Iterator[Path]:
    d = world_searchable_tmpdir("jpu-slurm-names-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


async def _sbatch(server: str, who: str, project: Path, *argv: str) -> str:
    out = ok(await jpu(server, who, "sbatch", *argv, cwd=project))
    assert out.startswith("Submitted batch job "), out  # sbatch's words: the id is word 4
    return out.split()[3]


async def test_U1_sbatch_is_submit_by_slurms_name(server: str, api: Api, project: Path) -> None:
    script = project / "train.sh"
    script.write_text("#!/bin/bash\n#SBATCH -J resnet\n#SBATCH -t 0:30:00\necho hi\n")
    job_id = await _sbatch(server, "bob", project, str(script), "-G", "2")
    job = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("bob"))).json()
    assert (job["name"], job["num_gpus"], job["time_limit_s"]) == ("resnet", 2, 1800)
    assert job["chdir"] == str(project)  # runs where it was submitted from, as sbatch
    out = ok(await jpu(server, "bob", "sbatch", "--parsable", "--wrap", "true", cwd=project))
    assert len(out.strip()) == 24 and out.count("\n") == 1
    assert "sbatch" in ok(await jpu(server, "bob", "--help"))


async def test_U1_squeue_flags_and_percent_fields(server: str, project: Path) -> None:
    a = await _sbatch(server, "bob", project, "--wrap", "true", "-J", "sweep", "-t", "90")
    b = await _sbatch(server, "bob", project, "--wrap", "true", "-J", "other")
    c = await _sbatch(server, "alice", project, "--wrap", "true", "-J", "sweep")

    lines = ok(await jpu(server, "carol", "squeue")).splitlines()  # the queue is public
    assert lines[0].split() == ["JOBID", "PARTITION", "NAME", "USER", "ST", "TIME", "NODES",
                                "NODELIST(REASON)"]  # fmt: skip
    assert {line.split()[0] for line in lines[1:]} >= {a, b, c}  # ids whole
    fmt = "%i|%j|%u|%t|%T|%M|%l|%D|%R|%a|%b"
    mine = ok(await jpu(server, "bob", "squeue", "--me", "-h", "-o", fmt)).splitlines()
    rows = {line.split("|")[0]: line.split("|") for line in mine}
    assert set(rows) == {a, b}
    assert rows[a][1:] == ["sweep", "bcg-bob", "PD", "PENDING", "0:00", "1:30:00", "1",
                           "(ConcurrencyLimit)", "BCG", "gpu:1"]  # fmt: skip
    by_user = ok(await jpu(server, "bob", "squeue", "-u", "bcg-alice", "--noheader", "-o", "%i"))
    assert by_user.split() == [c]
    listed = _ids(await jpu(server, "bob", "squeue", "-h", "-o", "%i", "-j", f"{a[:7]},{c}"))
    assert listed == sorted([a, c])  # ids or unique prefixes, comma-separated
    assert ok(await jpu(server, "bob", "squeue", "-h", "-t", "R", "-o", "%i")) == ""
    pending = _ids(await jpu(server, "bob", "squeue", "-h", "-t", "PD", "--me", "-o", "%i"))
    assert set(pending) == {a, b}
    named = _ids(await jpu(server, "bob", "squeue", "-h", "-n", "sweep", "-o", "%.10i"))
    assert named == sorted([a, c])  # an id is never cut (a cut task id names its array)
    rc, out, err = await jpu(server, "bob", "squeue", "-o", "%i %Y")
    assert rc == 1 and out == "" and "%Y is not supported" in err and err.count("\n") == 1


def _ids(run: tuple[int, str, str]) -> list[str]:
    return sorted(ok(run).split())


async def test_U1_scancel_by_id_prefix_name_and_state_silently(
    server: str, api: Api, project: Path
) -> None:
    a = await _sbatch(server, "bob", project, "--wrap", "true", "-J", "sweep")
    b = await _sbatch(server, "bob", project, "--wrap", "true", "-J", "sweep")
    c = await _sbatch(server, "bob", project, "--wrap", "true", "-J", "keep")
    d = await _sbatch(server, "alice", project, "--wrap", "true", "-J", "sweep")

    assert ok(await jpu(server, "bob", "scancel", a[:8])) == ""  # silent, as scancel
    assert ok(await jpu(server, "bob", "scancel", "-n", "sweep", "-t", "PD")) == ""
    states = {}
    for who, job_id in (("bob", a), ("bob", b), ("bob", c), ("alice", d)):
        states[job_id] = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer(who))).json()
    assert [states[j]["state"] for j in (a, b, c, d)] == [
        "CANCELLING", "CANCELLING", "PERSONAL_QUEUE_WAIT", "PERSONAL_QUEUE_WAIT",
    ]  # fmt: skip
    await api.append(JobEnded(**api.kw(), job_id=a, attempt=1, state="CANCELLED"))  # as the agent
    rc, out, err = await jpu(server, "bob", "scancel", a)  # already ended: one line, exit 1
    assert rc == 1 and out == "" and f"Kill job error on job id {a}" in err
    assert ok(await jpu(server, "bob", "scancel", "-Q", a)) == ""
    rc, _out, err = await jpu(server, "bob", "scancel")
    assert rc == 1 and "no job specification" in err


async def test_U1_sacct_jobs_format_parsable_and_window(
    server: str, api: Api, project: Path
) -> None:
    a = await _sbatch(server, "bob", project, "--wrap", "true", "-J", "first")
    b = await _sbatch(server, "bob", project, "--wrap", "true", "-J", "second", "-t", "10")
    ended = JobEnded(**api.kw(), job_id=a, attempt=1, state="FAILED", exit_code=3,
                     reason="NonZeroExitCode")  # fmt: skip
    await api.append(ended)  # as the agent reports it
    out = ok(await jpu(server, "bob", "sacct", "-j", f"{a[:9]},{b}", "-X", "-n", "-P",
                       "--format=JobID,JobName,State,ExitCode,Timelimit,Account"))  # fmt: skip
    assert out.splitlines() == [
        f"{a}|first|FAILED|3:0|UNLIMITED|BCG",
        f"{b}|second|PENDING|0:0|10:00|BCG",
    ]
    table = ok(await jpu(server, "bob", "sacct", "-j", b)).splitlines()  # sacct's default
    assert table[0].split() == ["JobID", "JobName", "Partition", "Account", "AllocCPUS",
                                "State", "ExitCode"]  # fmt: skip
    assert table[1].startswith("-" * 26 + " ---------- ")  # the id's column fits it whole
    assert table[2].split()[0] == b and table[2].split()[-2:] == ["PENDING", "0:0"]
    # no -j: the caller's jobs since midnight (-S for another window), never another user's
    today = ok(await jpu(server, "bob", "sacct", "-n", "-P", "-o", "JobID,State"))
    assert today.splitlines() == [f"{a}|FAILED", f"{b}|PENDING"]
    failed = ok(await jpu(server, "bob", "sacct", "-n", "-P", "-o", "JobID", "-s", "F"))
    assert failed.split() == [a]
    assert ok(await jpu(server, "alice", "sacct", "-n", "-P", "-o", "jobid")) == ""
    # a window: jobs submitted in it, and (no -E) those not ended yet, as sacct shows them
    later = ok(await jpu(server, "bob", "sacct", "-n", "-S", "2999-01-01", "-o", "JobID"))
    assert later.split() == [b]
    window = ["-S", "2999-01-01", "-E", "2999-01-02T12:00"]
    assert ok(await jpu(server, "bob", "sacct", "-n", *window, "-o", "JobID")) == ""
    rc, out, err = await jpu(server, "bob", "sacct", "--format", "JobID,Bogus")
    assert rc == 1 and "unknown field 'Bogus'" in err


async def test_U1_scontrol_hold_release_and_show_job(server: str, api: Api, project: Path) -> None:
    job_id = await _sbatch(server, "bob", project, "--wrap", "true", "-J", "held", "-t", "5")
    # the whole id: prefixes for hold/release are U8's work in the API (another change)
    assert ok(await jpu(server, "bob", "scontrol", "hold", job_id)) == ""
    job = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("bob"))).json()
    assert job["held"] is True
    shown = ok(await jpu(server, "bob", "scontrol", "show", "job", job_id[:10]))
    lines = shown.splitlines()
    assert lines[0] == f"JobId={job_id} JobName=held"
    pairs = dict(kv.split("=", 1) for line in lines for kv in line.split())
    assert pairs["JobState"] == "PENDING" and pairs["Held"] == "Yes"
    assert pairs["TimeLimit"] == "5:00" and pairs["WorkDir"] == str(project)
    assert pairs["UserId"] == "bcg-bob" and pairs["Account"] == "BCG"
    assert ok(await jpu(server, "bob", "scontrol", "release", job_id)) == ""
    job = (await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("bob"))).json()
    assert job["held"] is False
    one = ok(await jpu(server, "bob", "scontrol", "-o", "show", "job", job_id))
    assert one.count("\n") == 1 and "Held=No" in one
    rc, out, err = await jpu(server, "carol", "scontrol", "show", "job", job_id)
    assert rc == 1 and out == "" and "FORBIDDEN" in err


# --- the shims on PATH ---------------------------------------------------------------------


def _fake(directory: Path, name: str) -> Path:
    """A stand-in for a Slurm install's command."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / name
    exe.write_text(f'#!/bin/sh\necho real-{name} "$@"\n')
    exe.chmod(0o755)
    return exe


async def _run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out.decode(), err.decode()


async def test_U1_slurm_shims_run_jpu_and_never_shadow_a_real_slurm(
    server: str, project: Path
) -> None:
    shims, slurm = project / "shims", project / "slurm"
    env = {**os.environ, "JPU_URL": server, "JPU_TOKEN": token_of("bob")}
    jpu_cli = [sys.executable, "-P", "-m", "jpu.cli.main"]
    # PATH holds no other squeue (not /usr/bin: the machine's own Slurm would count there)
    rc, out, err = await _run([*jpu_cli, "slurm-shims", "install", str(shims)],
                              {**env, "PATH": str(shims)}, project)  # fmt: skip
    assert rc == 0 and "Installed sbatch, squeue, scancel, sacct, scontrol" in out, err
    assert {p.name for p in shims.iterdir()} == {"sbatch", "squeue", "scancel", "sacct",
                                                 "scontrol"}  # fmt: skip
    assert all(os.stat(p).st_mode & 0o777 == 0o755 for p in shims.iterdir())
    path = {**env, "PATH": str(shims)}
    job = (await _run(["sbatch", "--parsable", "--wrap", "true"], path, project))[1].strip()
    assert len(job) == 24
    rc, out, err = await _run(["squeue", "--me", "-h", "-o", "%i %t"], path, project)
    assert rc == 0 and out.split() == [job, "PD"], err
    # a shim an earlier jpu wrote (it ran `-m jpu.cli.slurm_shims`) still runs jpu's squeue
    earlier = project / "earlier-shims"
    earlier.mkdir()
    (earlier / "squeue").write_text(
        f"#!/bin/sh\n# jpu-slurm-shim: `squeue` runs `jpu squeue`\n"
        f'exec {shlex.quote(sys.executable)} -P -m jpu.cli.slurm_shims "$0" squeue "$@"\n'
    )
    (earlier / "squeue").chmod(0o755)
    rc, out, err = await _run(["squeue", "--me", "-h", "-o", "%i %t"],
                              {**env, "PATH": str(earlier)}, project)  # fmt: skip
    assert rc == 0 and out.split() == [job, "PD"], err
    # Slurm installed later, after the shims on PATH: the shim runs Slurm's, and says so
    _fake(slurm, "squeue")
    rc, out, err = await _run(["squeue", "-h"], {**env, "PATH": f"{shims}:{slurm}"}, project)
    assert (rc, out.strip()) == (0, "real-squeue -h") and "jpu-slurm-shim" in err
    # install refuses a name a real Slurm already has on PATH (before or after DIR)
    other = project / "shims2"
    for order in (f"{slurm}:{other}", f"{other}:{slurm}"):
        rc, out, err = await _run([*jpu_cli, "slurm-shims", "install", str(other)],
                                  {**env, "PATH": order}, project)  # fmt: skip
        assert rc == 1 and f"squeue: not installed: a squeue is already on your PATH at " \
            f"{slurm / 'squeue'}" in err  # fmt: skip
        assert not (other / "squeue").exists() and (other / "sacct").exists()
    rc, out, _ = await _run([*jpu_cli, "slurm-shims", "uninstall", str(shims)], path, project)
    assert rc == 0 and not any(shims.iterdir())


# --- running and ended jobs: the whole stack, jobs as real processes ------------------------


async def test_U1_squeue_sacct_scontrol_on_running_and_ended_jobs(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, project: Path
) -> None:
    gate = project / "go"
    async with logs_stack(nats_url, pool, pg_dsn) as s:
        url = str(s.client.base_url).rstrip("/")
        wait = f"while [ ! -e {gate} ]; do sleep 0.05; done"
        running = await _sbatch(url, "bcg-bob", project, "--wrap", wait, "-J", "gated", "-t", "5")
        failing = await _sbatch(url, "bcg-bob", project, "--wrap", "exit 3", "-J", "three")
        await wait_job(s, "bcg-bob", running, lambda j: j["state"] == "RUNNING")
        await wait_job(s, "bcg-bob", failing, ended)
        await asyncio.sleep(1.1)  # a second of run time

        line = ok(await jpu(url, "bcg-bob", "squeue", "-h", "-t", "R", "-o", "%i %t %T %N %P %L"))
        job_id, st, state, node, tier, left = line.split()
        assert (job_id, st, state) == (running, "R", "RUNNING")
        assert (node, tier) in (("n-small", "small"), ("n-big", "big"))
        assert left.startswith("4:5")  # 5 minutes less the second it ran
        elapsed = ok(await jpu(url, "bcg-bob", "squeue", "-h", "-j", running[:8], "-o", "%M"))
        assert elapsed.strip() not in ("", "0:00")
        shown = ok(await jpu(url, "bcg-bob", "scontrol", "show", "job", running[:8]))
        pairs = dict(kv.split("=", 1) for ln in shown.splitlines() for kv in ln.split())
        assert pairs["JobState"] == "RUNNING" and pairs["NodeList"] == node
        assert pairs["Partition"] == tier and pairs["RunTime"] != "0:00"

        gate.touch()
        await wait_job(s, "bcg-bob", running, ended)
        out = ok(await jpu(url, "bcg-bob", "sacct", "-X", "-n", "-P", "-j", f"{running},{failing}",
                           "--format=JobID,JobName,State,ExitCode,Elapsed,NodeList"))  # fmt: skip
        rows = {r.split("|")[0]: r.split("|") for r in out.splitlines()}
        assert rows[running][1:4] == ["gated", "COMPLETED", "0:0"]
        assert rows[running][4] != "0:00" and rows[running][5] == node
        assert rows[failing][1:4] == ["three", "FAILED", "3:0"]


async def test_U8_array_tasks_by_slurms_ids_in_squeue_sacct_scancel(
    server: str, api: Api, project: Path
) -> None:
    array = await _sbatch(server, "bob", project, "--array", "0-3", "--wrap", "true", "-J", "arr")
    tasks = [f"{array}_{k}" for k in range(4)]
    picked = ok(await jpu(server, "bob", "squeue", "-h", "-o", "%i", "-j", f"{array[:8]}_[1-2]"))
    assert sorted(picked.split()) == tasks[1:3]
    out = ok(await jpu(server, "bob", "sacct", "-n", "-P", "-o", "JobID,JobName", "-j", array))
    assert out.splitlines() == [f"{t}|arr" for t in tasks]  # an array's id: each task
    shown = ok(await jpu(server, "bob", "scontrol", "show", "job", tasks[3]))
    assert f"JobId={tasks[3]} " in shown and f"ArrayJobId={array} ArrayTaskId=3" in shown
    assert ok(await jpu(server, "bob", "scancel", "-n", "arr", f"{array[:8]}_[0,3]")) == ""
    states = [
        (await api.client.get(f"/v1/jobs/{t}", headers=bearer("bob"))).json()["state"]
        for t in tasks
    ]
    assert states == ["CANCELLING", "PERSONAL_QUEUE_WAIT", "PERSONAL_QUEUE_WAIT", "CANCELLING"]
