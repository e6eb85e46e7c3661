"""`jpu` as a user runs it (a real process) against the real gateway over HTTP (uvicorn on a free
port), with intake and the projections on real NATS JetStream + PostgreSQL (SPEC U1, §8)."""

from __future__ import annotations

import json
from pathlib import Path

from jpu.testing.api import Api
from jpu.testing.cli import failed, jpu, ok


async def test_U1_submit_show_events_cancel(server: str, api: Api, tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\necho 'training' \"$(hostname)\"\n")
    out = ok(await jpu(server, "alice", "submit", str(script), "--gpus", "1", "--tier",
                       "rtx4090", "--time", "1:00:00", "--env", "SEED=7", "--json"))  # fmt: skip
    job = json.loads(out)
    assert (job["name"], job["num_gpus"], job["tiers"], job["time_limit_s"]) == (
        "train.sh", 1, ["rtx4090"], 3600,
    )  # fmt: skip
    assert job["command"] == script.read_text() and job["env"] == {"SEED": "7"}
    shown = ok(await jpu(server, "alice", "show", job["id"]))
    assert f"JobId: {job['id']}" in shown and "TimeLimit: 01:00:00" in shown
    assert "echo 'training' \"$(hostname)\"" in shown  # the command, verbatim
    events = ok(await jpu(server, "alice", "events", job["id"]))
    assert events.splitlines()[0].split() == ["SEQ", "TIME", "EVENT", "DETAILS"]
    assert "JobSubmitted" in events
    cancelled = ok(await jpu(server, "alice", "cancel", job["id"]))
    assert cancelled.strip() == f"Cancelled job {job['id']} (it had not started)"  # never ran
    failed(await jpu(server, "carol", "show", job["id"]), "FORBIDDEN")  # another lab's user


async def test_U1_submit_wrap_prints_the_job_like_sbatch(server: str, api: Api) -> None:
    out = ok(await jpu(server, "bob", "submit", "--wrap", "python eval.py", "-G", "1"))
    assert out.startswith("Submitted job ") and out.rstrip().endswith(")")
    queue = ok(await jpu(server, "bob", "queue"))
    header, *rows = queue.splitlines()
    assert header.split()[:4] == ["RANK", "JOBID", "NAME", "LAB"]
    job_id = out.split()[2]
    assert any(r.split()[1] == job_id and "BCG" in r.split() for r in rows), queue
    data = json.loads(ok(await jpu(server, "bob", "queue", "--json")))
    assert any(e["job_id"] == job_id for e in data["queue"])


async def test_U1_errors_are_one_line_with_code(server: str, api: Api) -> None:
    failed(await jpu(server, "alice", "submit", "--wrap", "x", "--gpus", "4"), "NO_FIT_PLACEMENT")
    failed(await jpu(server, "alice", "submit", "--wrap", "x", "--tier", "h100"),
           "VALIDATION_ERROR")  # fmt: skip
    failed(await jpu(server, "not-a-token", "queue"), "UNAUTHENTICATED")
    failed(await jpu(server, "alice", "show", "j-does-not-exist"), "NOT_FOUND")


async def test_U1_usage_pool_and_maintenance(server: str, api: Api, tmp_path: Path) -> None:
    usage = ok(await jpu(server, "alice", "usage"))
    assert usage.splitlines()[0].split()[:2] == ["LAB", "USAGE_NOW"] and "BCG" in usage
    assert ok(await jpu(server, "alice", "usage", "KDG")).splitlines()[1].split()[0] == "KDG"
    pool = ok(await jpu(server, "alice", "pool"))
    assert any(line.split()[:3] == ["gpu-4090x2-01", "rtx4090", "2"] for line in pool.splitlines())
    failed(await jpu(server, "alice", "admin", "maintenance", "start"), "FORBIDDEN")
    started = ok(await jpu(server, "admin", "admin", "maintenance", "start", "-m", "NFS swap"))
    assert started.startswith("Maintenance: DRAINING") and "NFS swap" in started
    failed(await jpu(server, "alice", "submit", "--wrap", "x"), "SERVICE_MAINTENANCE")
    status = json.loads(ok(await jpu(server, "bob", "admin", "maintenance", "status", "--json")))
    assert status["state"] == "DRAINING" and status["message"] == "NFS swap"
    ended = ok(await jpu(server, "admin", "admin", "maintenance", "end"))
    assert ended.startswith("Maintenance: NORMAL")
