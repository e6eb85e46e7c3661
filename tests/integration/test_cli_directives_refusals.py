"""`jpu` as a user runs it (a real process) against the real gateway over HTTP with intake and
the projections on real NATS JetStream + PostgreSQL (SPEC U5): `#SBATCH` lines
honoured or refused before anything is submitted, refusals that say the fix, and `jpu jobs`
page by page. Every user's limit is 0 here (test_api_support), so jobs stay in their personal
queues: what these tests check is decided at submission."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from jpu.testing.api import Api, bearer
from jpu.testing.cli import failed, jpu, ok
from jpu.testing.inprocess import serve_http


@pytest_asyncio.fixture
async def server(api: Api) -> AsyncIterator[str]:
    """The gateway of `api` under uvicorn: real HTTP for the CLI's own process."""
    async with serve_http(api.app) as url:
        yield url


async def _count(api: Api) -> int:
    return int(await api.pool.fetchval("SELECT count(*) FROM jobs"))


async def test_U5_sbatch_directives_are_honoured_and_flags_win(
    server: str, api: Api, tmp_path: Path
) -> None:
    script = tmp_path / "train.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --job-name=resnet\n#SBATCH --gres=gpu:rtx4090:2\n"
        "#SBATCH -t 1:00:00 --nodes=1\n#JPU --env SEED=7\n\npython train.py\n"
    )
    job = json.loads(ok(await jpu(server, "alice", "submit", str(script), "--json")))
    assert (job["name"], job["num_gpus"], job["tiers"], job["time_limit_s"]) == (
        "resnet", 2, ["rtx4090"], 3600,
    )  # fmt: skip
    assert job["env"] == {"SEED": "7"} and job["command"] == script.read_text()
    flags = json.loads(ok(await jpu(server, "alice", "submit", str(script), "-G", "1", "-J",
                                    "mine", "--tier", "rtx3080ti", "--json")))  # fmt: skip
    assert (flags["name"], flags["num_gpus"], flags["tiers"]) == ("mine", 1, ["rtx3080ti"])

    # a directive further down is ignored, as sbatch ignores it, and the user is told
    late = tmp_path / "late.sh"
    late.write_text("#!/bin/bash\necho go\n#SBATCH --gpus=2\n")
    rc, out, err = await jpu(server, "alice", "submit", str(late), "--json")
    assert rc == 0 and json.loads(out)["num_gpus"] == 1
    assert "line(s) 3: #SBATCH/#JPU after the first command are ignored" in err


async def test_U6_impossible_options_are_refused_before_anything_is_submitted(
    server: str, api: Api, tmp_path: Path
) -> None:
    before = await _count(api)
    script = tmp_path / "sweep.sh"
    script.write_text("#!/bin/bash\n#SBATCH --exclusive\n#SBATCH -N 2 --mem=65G\npython sweep.py\n")
    rc, out, err = await jpu(server, "alice", "submit", str(script))
    assert rc == 1 and out == "", err
    assert err.startswith("jpu submit: error: sweep.sh:3: #SBATCH -N 2: a job runs on one node")
    assert "sweep.sh:3: #SBATCH --mem=65G: 65G of memory: no tier brings that much" in err
    assert "--exclusive" not in err  # accepted with a warning, not a reason to refuse
    assert await _count(api) == before  # nothing reached the platform


async def test_U6_warnings_are_printed_kept_on_the_job_and_shown(
    server: str, api: Api, tmp_path: Path
) -> None:
    lab = json.loads(ok(await jpu(server, "alice", "whoami", "--json")))["lab"]
    script = tmp_path / "asr.sh"
    script.write_text(
        "#!/bin/bash\n#SBATCH --job-name=asr --exclusive --qos=normal\n"
        f"#SBATCH -A {lab} -p gpu --gres=gpu:1 -c 8 --mem=30G\n"
        "#SBATCH -o logs/%x-%j.out --open-mode=append --signal=B:USR1@90\nsrun python asr.py\n"
    )
    rc, out, err = await jpu(
        server, "alice", "submit", str(script), "--parsable", "-A", "elsewhere"
    )
    assert rc == 0, err
    job_id = out.strip()
    lines = [w for w in err.splitlines() if w.startswith("jpu submit: warning: asr.sh:")]
    lines += [w for w in err.splitlines() if w.startswith("jpu submit: warning: command line:")]
    assert [w.split(": ")[3].split()[-1] for w in lines] == [
        "--exclusive",
        "--qos=normal",
        "elsewhere",
    ]
    r = await api.client.get(f"/v1/jobs/{job_id}", headers=bearer("alice"))
    job = r.json()
    assert job["tiers"] == ["rtx4090"]  # 8 CPUs: the 3080 Ti brings 6 per GPU
    assert job["sbatch"] == {
        "output": "logs/%x-%j.out",
        "open_mode": "append",
        "signal": "B:USR1@90",
    }
    assert len(job["sbatch_warnings"]) == 3 and "your lab" in job["sbatch_warnings"][2]
    shown = ok(await jpu(server, "alice", "show", job_id))
    assert "StdOut: logs/%x-%j.out" in shown and "Signal: B:USR1@90" in shown
    assert shown.count("Warning: ") == 3 and "--qos=normal: accepted and ignored" in shown


async def test_U1_refusals_say_the_limit_and_the_valid_values(server: str, api: Api) -> None:
    err = failed(await jpu(server, "alice", "submit", "--wrap", "x", "--gpus", "4"),
                 "NO_FIT_PLACEMENT")  # fmt: skip
    assert "the largest placement that can run it has 2 GPUs (rtx4090 on gpu-4090x2-01" in err
    assert "ask for --gpus 2 or fewer" in err
    err = failed(await jpu(server, "alice", "submit", "--wrap", "x", "--tier", "a100"),
                 "VALIDATION_ERROR")  # fmt: skip
    assert "unknown tier(s): a100 (tiers here: rtx3080ti, rtx4090)" in err
    rc, out, err = await jpu(server, "alice", "submit", "--wrap", "x", "--teir", "rtx4090")
    assert rc == 2 and out == "" and "--teir (did you mean --tier?)" in err
    err = failed(await jpu(server, "not-a-token", "queue"), "UNAUTHENTICATED")
    assert "set JPU_TOKEN" in err and "jpu-admin token create USER" in err

    ok(await jpu(server, "admin", "admin", "maintenance", "start", "-m", "NFS swap, back by 10:00"))
    err = failed(await jpu(server, "alice", "submit", "--wrap", "x"), "SERVICE_MAINTENANCE")
    assert "(maintenance DRAINING: NFS swap, back by 10:00)" in err
    ok(await jpu(server, "admin", "admin", "maintenance", "end"))


async def test_U1_submit_says_queued_when_the_limit_holds_the_job(server: str, api: Api) -> None:
    # every limit is 0 here: the job waits for a slot
    out = ok(await jpu(server, "bob", "submit", "--wrap", "true"))
    job_id = out.split()[2]
    assert out.strip() == (
        f"Submitted job {job_id} — queued (waiting for a free slot: 0 of 0 in use; it moves to "
        "the global queue when one of your jobs ends)"
    )


async def test_U1_jobs_are_listed_page_by_page_and_history_only_ended(
    server: str, api: Api
) -> None:
    ids = [
        json.loads(ok(await jpu(server, "bob", "submit", "--wrap", "true", "-J", f"j{i}",
                                "--json")))["id"]
        for i in range(5)
    ]  # fmt: skip
    two = ok(await jpu(server, "bob", "jobs", "--limit", "2")).splitlines()
    assert two[0].split()[:8] == [
        "JOBID", "NAME", "USER", "LAB", "STATE", "EXITCODE", "ATTEMPTS", "GPUS",
    ]  # fmt: skip
    assert [line.split()[0] for line in two[1:3]] == ids[::-1][:2]  # newest first
    assert two[3].startswith("(more jobs: --all")
    page = json.loads(ok(await jpu(server, "bob", "--json", "jobs", "--limit", "3")))
    assert [j["id"] for j in page["jobs"]] == ids[::-1][:3] and page["next_cursor"]
    every = json.loads(ok(await jpu(server, "bob", "jobs", "--all", "--json")))
    assert [j["id"] for j in every["jobs"]] == ids[::-1] and every["next_cursor"] is None
    assert all(j["gpu_seconds"] == 0 and j["elapsed_s"] is None for j in every["jobs"])
    waiting = json.loads(ok(await jpu(server, "bob", "jobs", "--state", "PD", "--json")))
    assert len(waiting["jobs"]) == 5
    assert json.loads(ok(await jpu(server, "bob", "history", "--json")))["jobs"] == []
    assert json.loads(ok(await jpu(server, "carol", "jobs", "--json")))["jobs"] == []  # not hers
    rc, _, err = await jpu(server, "bob", "jobs", "--state", "DONE")
    assert rc == 1 and "--state DONE: unknown state; valid: PERSONAL_QUEUE_WAIT" in err
