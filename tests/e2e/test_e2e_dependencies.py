"""Pipelines (SPEC Q8) and holds (Q9) through the running platform: the real API, intake,
dispatcher and local agent (jobs are real processes). Each test uses its own users and leaves
the cluster idle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from jpu.testing.e2e_stack import TERMINAL, Stack, by_type
from jpu.testing.stack_process import world_searchable_tmpdir

NEVER = "DEPENDENCY_NEVER_SATISFIED"


def _error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, f"{r.status_code} {r.text}"
    error = r.json()["error"]
    assert error["code"] == code, error
    return dict(error)


def _count(stack: Stack, user: str) -> int:
    return len(stack.api(user).get("/v1/jobs", limit=500)["jobs"])


def test_Q8_pipeline_afterok_second_starts_only_after_the_first_completed(stack: Stack) -> None:
    alice = stack.api("bcg-alice")
    first = alice.submit(stack.hold("q8-first"), name="prep")
    second = alice.submit("true", name="train", dependency=f"afterok:{first['id']}")
    third = alice.submit("true", name="eval", dependency=f"afterok:{second['id']}")
    assert second["pending_reason"] == "Dependency", second
    alice.wait(first["id"], ["RUNNING"])
    waiting = alice.job(second["id"])  # Q8: waits in the personal queue while the first runs
    assert waiting["state"] == "PERSONAL_QUEUE_WAIT", waiting
    assert waiting["pending_reason"] == "Dependency", waiting
    assert waiting["dependency"] == f"afterok:{first['id']}", waiting
    queue = alice.get("/v1/queue", user="bcg-alice")["queue"]
    assert {e["job_id"]: e["pending_reason"] for e in queue} == {
        second["id"]: "Dependency",
        third["id"]: "Dependency",
    }, queue
    assert alice.job(third["id"])["pending_reason"] == "Dependency"

    stack.release("q8-first")
    done1 = alice.wait(first["id"], TERMINAL)
    done2 = alice.wait(second["id"], TERMINAL, timeout=30)
    done3 = alice.wait(third["id"], TERMINAL, timeout=30)
    assert [d["state"] for d in (done1, done2, done3)] == ["COMPLETED"] * 3
    assert done2["started_at"] >= done1["ended_at"], (done1, done2)
    assert done3["started_at"] >= done2["ended_at"], (done2, done3)


def test_Q8_pipeline_first_fails_the_others_end_dependency_never_satisfied(stack: Stack) -> None:
    dave = stack.api("kdg-dave")
    first = dave.submit("exit 3", name="prep")
    second = dave.submit("true", name="train", dependency=f"afterok:{first['id']}")
    third = dave.submit("true", name="eval", dependency=f"afterok:{second['id']}")
    assert dave.wait(first["id"], TERMINAL)["state"] == "FAILED"
    for job in (second, third):
        ended = dave.wait(job["id"], TERMINAL, timeout=30)
        assert (ended["state"], ended["reason"]) == ("CANCELLED", NEVER), ended
        assert ended["started_at"] is None and ended["usage_charged"] == 0, ended
        ends = by_type(dave.events(job["id"]), "JobEnded")
        assert len(ends) == 1 and not by_type(dave.events(job["id"]), "JobPromoted"), ends


def test_Q8_pipeline_array_then_afterok_on_the_whole_array(stack: Stack) -> None:
    """Slurm's sweep → collect: `afterok:<array id>` waits for every task, then runs; on an
    array with a failed task it ends DEPENDENCY_NEVER_SATISFIED."""
    bob = stack.api("bcg-bob")
    sweep = bob.submit(stack.hold("q8-sweep"), name="sweep", array="0-2")
    collect = bob.submit("true", name="collect", dependency=f"afterok:{sweep['id']}")
    assert collect["pending_reason"] == "Dependency", collect
    tasks = [f"{sweep['id']}_{k}" for k in range(3)]
    for task in tasks:
        bob.wait(task, ["RUNNING"])
    assert bob.job(collect["id"])["pending_reason"] == "Dependency"  # every task still runs
    stack.release("q8-sweep")
    ended = [bob.wait(task, TERMINAL) for task in tasks]
    assert {t["state"] for t in ended} == {"COMPLETED"}, ended
    done = bob.wait(collect["id"], TERMINAL, timeout=30)
    assert done["state"] == "COMPLETED", done
    assert done["started_at"] >= max(t["ended_at"] for t in ended), (ended, done)

    bad = bob.submit('test "$JPU_ARRAY_TASK_ID" != 1', name="sweep2", array="0-2")
    never = bob.submit("true", name="collect2", dependency=f"afterok:{bad['id']}")
    ended2 = bob.wait(never["id"], TERMINAL, timeout=60)
    assert (ended2["state"], ended2["reason"]) == ("CANCELLED", NEVER), ended2
    assert bob.wait(f"{bad['id']}_1", TERMINAL)["state"] == "FAILED"


def test_Q8_afternotok_runs_after_a_failure_and_another_users_job_of_the_lab(
    stack: Stack,
) -> None:
    erin, frank = stack.api("osl-erin"), stack.api("osl-frank")
    first = erin.submit("exit 1", name="try")
    cleanup = frank.submit("true", name="cleanup", dependency=f"afternotok:{first['id']}")
    assert erin.wait(first["id"], TERMINAL)["state"] == "FAILED"
    assert frank.wait(cleanup["id"], TERMINAL, timeout=30)["state"] == "COMPLETED"


def test_Q8_refusals_are_422_naming_dependency_and_append_nothing(stack: Stack) -> None:
    carol, alice = stack.api("kdg-carol"), stack.api("bcg-alice")
    other_lab = alice.submit("true", name="theirs")
    before = _count(stack, "kdg-carol")
    for dependency in (
        f"afterok:{other_lab['id']}",  # another lab's job
        "afterok:0123456789abcdef01234567",  # no such job
        "afterok:",  # no id
        "aftermath:1",  # no such kind
        "afterok:1?afterany:2",  # '?' (any of) is not supported
    ):
        r = carol.post_job(
            {"name": "x", "command": "true", "num_gpus": 1, "dependency": dependency}
        )
        error = _error(r, 422, "VALIDATION_ERROR")
        assert error["details"]["field"] == "dependency", (dependency, error)
    r = carol.post_job({"name": "x", "command": "true", "num_gpus": 1, "hold": "yes"})
    assert _error(r, 422, "VALIDATION_ERROR")["details"]["field"] == "hold"
    assert _count(stack, "kdg-carol") == before  # nothing appended


def test_Q9_held_job_waits_with_reason_held_until_released(stack: Stack) -> None:
    bob, carol = stack.api("bcg-bob"), stack.api("kdg-carol")
    held = bob.submit("true", name="held", hold=True)
    assert (held["state"], held["pending_reason"], held["held"]) == (
        "PERSONAL_QUEUE_WAIT",
        "Held",
        True,
    ), held
    after = bob.submit("true", name="next")  # Q5: promoted past the held job
    assert bob.wait(after["id"], TERMINAL)["state"] == "COMPLETED"
    shown = bob.job(held["id"])
    assert (shown["state"], shown["pending_reason"]) == ("PERSONAL_QUEUE_WAIT", "Held"), shown
    queue = bob.get("/v1/queue", user="bcg-bob")["queue"]
    assert [(e["job_id"], e["pending_reason"]) for e in queue] == [(held["id"], "Held")], queue
    _error(carol.http.post(f"/v1/jobs/{held['id']}/release"), 403, "FORBIDDEN")
    r = bob.http.post(f"/v1/jobs/{held['id']}/release")
    assert r.status_code == 200 and r.json()["held"] is False, r.text
    assert bob.wait(held["id"], TERMINAL)["state"] == "COMPLETED"
    r = bob.http.post(f"/v1/jobs/{held['id']}/hold")  # only in the personal queue
    _error(r, 409, "NOT_IN_PERSONAL_QUEUE")


def test_Q9_lab_admin_holds_and_releases_a_queued_job(stack: Stack) -> None:
    alice, admin = stack.api("bcg-alice"), stack.api("admin")
    blocker = alice.submit(stack.hold("q9-blocker"), name="blocker")
    queued = alice.submit("true", name="queued", dependency=f"afterany:{blocker['id']}")
    r = admin.http.post(f"/v1/jobs/{queued['id']}/hold")
    assert r.status_code == 200 and r.json()["pending_reason"] == "Held", r.text
    stack.release("q9-blocker")
    alice.wait(blocker["id"], TERMINAL)
    assert alice.job(queued["id"])["pending_reason"] == "Held"  # its dependency is met now
    assert admin.http.post(f"/v1/jobs/{queued['id']}/release").status_code == 200
    assert alice.wait(queued["id"], TERMINAL, timeout=30)["state"] == "COMPLETED"


def _jpu(stack: Stack, user: str, *args: str, cwd: Path) -> str:
    jpu = Path(sys.executable).with_name("jpu")
    run = subprocess.run(
        [str(jpu), *args, "--url", stack.url, "--token", f"demo-{user}"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=cwd,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_Q8_Q9_sbatch_script_with_dependency_and_hold_through_the_cli(stack: Stack) -> None:
    tmp_path = world_searchable_tmpdir("jpu-q8-")  # the job's account runs in it (U5)
    try:
        alice = stack.api("bcg-alice")
        first = alice.submit(stack.hold("q8-cli"), name="prep")
        script = tmp_path / "train.sh"
        script.write_text(
            f"#!/bin/bash\n#SBATCH --dependency=afterok:{first['id']}\n#SBATCH -H\ntrue\n"
        )
        out = _jpu(stack, "bcg-alice", "submit", str(script), cwd=tmp_path)
        assert "held (Q9)" in out, out
        job_id = out.split()[2]
        shown = _jpu(stack, "bcg-alice", "show", job_id, cwd=tmp_path)
        assert f"afterok:{first['id']}" in shown and "Held" in shown, shown
        _jpu(stack, "bcg-alice", "release", job_id, cwd=tmp_path)
        assert alice.job(job_id)["pending_reason"] == "Dependency"  # released, still waits on prep
        stack.release("q8-cli")
        assert alice.wait(job_id, TERMINAL, timeout=30)["state"] == "COMPLETED"
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
