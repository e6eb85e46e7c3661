"""A job's life through the running platform (SPEC §2, §3, §5, §8), over HTTP and the `jpu` CLI.

One stack (default cluster: 2 × 2 rtx4090 + 2 × 2 rtx3080ti) shared by the tests of this module;
each test uses its own users and leaves the cluster idle. It keeps the default 5 s `cycle_s`: every
step below must come from the event-triggered cycles (D8), well within the periodic one.
"""

from __future__ import annotations

import httpx
import pytest

from jpu.testing.api import assert_error
from jpu.testing.e2e_stack import ACTIVE, TERMINAL, Stack, by_type, jpu_cli, one, wait_until

STACK_ENV = {"JPU_CYCLE_S": "5"}
RTX4090_TFLOPS = 82.6
HALF_LIFE_S = 7 * 24 * 3600.0
OOM_ON_FIRST_ATTEMPT = """echo "attempt $JOB_ATTEMPT on $CUDA_VISIBLE_DEVICES"
if [ "$JOB_ATTEMPT" = 1 ]; then
  echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2
  exit 1
fi
echo "trained on attempt $JOB_ATTEMPT"
"""


def job_count(stack: Stack, user: str) -> int:
    return len(stack.api(user).get("/v1/jobs", limit=500)["jobs"])


def test_F1_submit_to_completed_charges_gpus_seconds_tflops(stack: Stack) -> None:
    alice = stack.api("bcg-alice")
    before = alice.lab("BCG")
    r = alice.post_job({"name": "f1", "command": "sleep 2", "num_gpus": 1})
    assert r.status_code == 201, r.text
    job = r.json()
    assert r.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert job["lab"] == "BCG" and job["user"] == "bcg-alice" and job["state"] in ACTIVE

    done = alice.wait(job["id"], TERMINAL, timeout=20)
    assert done["state"] == "COMPLETED" and done["exit_code"] == 0, done
    # T1: on an idle cluster the best tier first
    assert done["placement"]["tier"] == "rtx4090", done
    assert done["placement"]["node"].startswith("gpu-4090x2-"), done
    assert len(done["placement"]["gpus"]) == 1

    events = alice.events(job["id"])
    assert [e["type"] for e in events] == [
        "JobSubmitted",
        "JobPromoted",
        "JobDispatched",
        "JobStarted",
        "JobEnded",
    ]
    assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
    ended = events[-1]
    assert ended["state"] == "COMPLETED" and ended["tflops"] == RTX4090_TFLOPS
    run_s = ended["gpu_seconds_run"] / 1  # one GPU
    # `sleep 2`, measured from the job's own start/end (mtime resolution, a loaded machine)
    assert run_s >= 1.98 and run_s <= 2.6, ended
    # F1: gpus × seconds × tflops, held from the dispatch (F5: the launch counts too)
    startup_s = ended["gpu_seconds_startup"] / 1
    assert 0.0 <= startup_s < 2.0, ended
    # startup + run = the backend's end − the dispatch, noticed at or after that end
    assert one(events, "JobDispatched")["ts"] + startup_s + run_s <= ended["ts"] + 0.05
    expected = 1 * (startup_s + run_s) * RTX4090_TFLOPS
    assert ended["usage"] == pytest.approx(expected, rel=1e-9)

    # F4: charged at the attempt's end, once; visible on the job and on the lab (UsageCharged)
    charged = alice.wait(job["id"], lambda j: j["usage_charged"] > 0, what="usage charged")
    assert charged["usage_charged"] == pytest.approx(expected, rel=1e-9)
    lab = wait_until(
        lambda: (x := alice.lab("BCG"))["as_of"] == ended["ts"] and x,
        10,
        lambda: f"BCG charged at {ended['ts']}: {alice.lab('BCG')}",
    )
    prior = before["raw_value"]
    if before["as_of"] is not None:  # F3: decay what was there, then add
        prior *= 0.5 ** ((ended["ts"] - before["as_of"]) / HALF_LIFE_S)
    assert lab["raw_value"] == pytest.approx(prior + expected, rel=1e-9, abs=1e-6), lab


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"command": "true", "num_gpus": 0}, "num_gpus"),
        ({"command": "true", "num_gpus": 9}, "num_gpus"),
        ({"command": "true", "num_gpus": "2"}, "num_gpus"),
        ({"command": "true", "num_gpus": 1, "tiers": ["h100"]}, "tiers"),
        ({"command": "x" * (64 * 1024 + 1), "num_gpus": 1}, "command"),
        ({"command": "", "num_gpus": 1}, "command"),
        ({"command": "true", "num_gpus": 1, "name": "bad name!"}, "name"),
        (
            {"command": "true", "num_gpus": 1, "env": {"CUDA_VISIBLE_DEVICES": "0"}},
            "env.CUDA_VISIBLE_DEVICES",
        ),
        ({"command": "true", "num_gpus": 1, "env": {"JOB_ATTEMPT": "7"}}, "env.JOB_ATTEMPT"),
        ({"command": "true", "num_gpus": 1, "env": {"SLURM_JOB_ID": "1"}}, "env.SLURM_JOB_ID"),
    ],
    ids=[
        "num_gpus_0",
        "num_gpus_9",
        "num_gpus_string",
        "unknown_tier",
        "oversized_command",
        "empty_command",
        "bad_name",
        "env_CUDA_VISIBLE_DEVICES",
        "env_JOB_ATTEMPT",
        "env_SLURM",
    ],
)
def test_Q1_validation_errors_name_the_field(stack: Stack, body: dict, field: str) -> None:
    alice = stack.api("bcg-alice")
    jobs_before = job_count(stack, "bcg-alice")
    error = assert_error(alice.post_job(body), 422, "VALIDATION_ERROR")
    assert error["details"]["field"] == field, error
    assert field in error["message"], error
    assert job_count(stack, "bcg-alice") == jobs_before  # synchronous, before any event


def test_Q2_no_fit_num_gpus_4(stack: Stack) -> None:
    alice = stack.api("bcg-alice")
    jobs_before = job_count(stack, "bcg-alice")
    # no placement has 4 GPUs (max_gpus 2 per tier, 2 GPUs per node)
    error = assert_error(
        alice.post_job({"command": "true", "num_gpus": 4}), 422, "NO_FIT_PLACEMENT"
    )
    assert error["details"]["num_gpus"] == 4
    # excluded by min_vram_gb: no tier has 48 GB
    body = {"command": "true", "num_gpus": 1, "min_vram_gb": 48}
    assert_error(alice.post_job(body), 422, "NO_FIT_PLACEMENT")
    assert job_count(stack, "bcg-alice") == jobs_before  # nothing queued
    assert stack.api("admin").get("/v1/queue")  # the queue still answers


def test_A_401_without_token(stack: Stack) -> None:
    jobs_before = job_count(stack, "admin")
    with httpx.Client(base_url=stack.url, timeout=10) as anon:
        for method, path in (
            ("GET", "/v1/me"),
            ("GET", "/v1/jobs"),
            ("POST", "/v1/jobs"),
            ("GET", "/v1/jobs/abc"),
            ("POST", "/v1/jobs/abc/cancel"),
            ("GET", "/v1/queue"),
            ("GET", "/v1/labs"),
            ("GET", "/v1/tiers"),
            ("GET", "/v1/placements"),
            ("POST", "/v1/admin/maintenance"),
        ):
            r = anon.request(method, path, json={"command": "true", "num_gpus": 1})
            assert_error(r, 401, "UNAUTHENTICATED")
            bad = {"Authorization": "Bearer demo-nobody"}
            assert_error(anon.request(method, path, headers=bad), 401, "UNAUTHENTICATED")
        # anonymous by design (SPEC §8, M5)
        assert anon.get("/healthz").status_code == 200
        assert anon.get("/v1/maintenance/status").json()["state"] == "NORMAL"
    assert job_count(stack, "admin") == jobs_before  # the anonymous POST created nothing


def test_A_403_cancel_other_labs_job(stack: Stack) -> None:
    frank, carol = stack.api("osl-frank"), stack.api("kdg-carol")
    job = frank.submit(stack.hold("a403"), name="a403")
    frank.wait(job["id"], ["RUNNING"])
    assert_error(carol.cancel(job["id"]), 403, "FORBIDDEN")
    assert_error(carol.http.get(f"/v1/jobs/{job['id']}"), 403, "FORBIDDEN")
    assert_error(carol.http.get(f"/v1/jobs/{job['id']}/events"), 403, "FORBIDDEN")
    assert_error(carol.cancel("no-such-job"), 404, "NOT_FOUND")
    # the refused cancel changed nothing: no JobCancelRequested, still running
    assert frank.job(job["id"])["state"] == "RUNNING"
    assert not by_type(frank.events(job["id"]), "JobCancelRequested")
    assert frank.cancel(job["id"]).status_code == 202  # the owner may
    assert frank.wait(job["id"], TERMINAL)["state"] == "CANCELLED"


def test_Q5_fourth_job_waits_in_personal_queue_and_is_promoted_when_one_ends(
    stack: Stack,
) -> None:
    dave = stack.api("kdg-dave")
    assert dave.get("/v1/me")["max_active_jobs"] == 3  # the configured default
    jobs = [dave.submit(stack.hold(f"q5-{i}"), name=f"q5-{i}")["id"] for i in range(4)]
    for j in jobs[:3]:
        dave.wait(j, ["RUNNING"])
    fourth = dave.wait(
        jobs[3],
        lambda j: j["state"] == "PERSONAL_QUEUE_WAIT" and j["pending_reason"] == "ConcurrencyLimit",
        what="PERSONAL_QUEUE_WAIT / ConcurrencyLimit",
    )
    assert fourth["queue_entered_at"] is None
    assert dave.get("/v1/me")["slots_in_use"] == 3, dave.get("/v1/me")
    # intake promotes another user's later job: it has processed dave's jobs and held the
    # fourth back (a positive signal, not a pause): the limit holds
    erin = stack.api("osl-erin")
    later = erin.submit("true", name="q5-later")["id"]
    erin.wait(later, lambda j: j["state"] != "PERSONAL_QUEUE_WAIT", what="erin's job promoted")
    assert dave.job(jobs[3])["state"] == "PERSONAL_QUEUE_WAIT"

    stack.release("q5-0")
    assert dave.wait(jobs[0], TERMINAL)["state"] == "COMPLETED"
    running = dave.wait(jobs[3], ["RUNNING"], what="promoted and started after a slot freed")
    ended = one(dave.events(jobs[0]), "JobEnded")
    promoted = one(dave.events(jobs[3]), "JobPromoted")
    dispatched = one(dave.events(jobs[3]), "JobDispatched")
    # Q5: promoted as the slot frees; D8: dispatched as it enters the global queue — both far
    # sooner than the periodic cycle (5 s here)
    assert 0 <= promoted["ts"] - ended["ts"] < 1.0, (ended["ts"], promoted["ts"])
    assert 0 <= dispatched["ts"] - promoted["ts"] < 1.0, (promoted["ts"], dispatched["ts"])
    assert running["queue_entered_at"] == promoted["queue_entered_at"] == promoted["ts"]


def test_X5_cancel_running_job_that_traps_sigterm_writes_checkpoint(stack: Stack) -> None:
    erin = stack.api("osl-erin")
    script = """trap 'echo "step 42" > "$JOB_OUTPUT_DIR/checkpoint"; exit 0' TERM
touch "$JOB_OUTPUT_DIR/ready"
while true; do sleep 0.05; done
"""
    job = erin.submit(script, name="x5")
    erin.wait(job["id"], ["RUNNING"])
    out = stack.output_dir(job["id"])
    wait_until(lambda: (out / "ready").exists(), 10, f"{out}/ready (the trap is set)")

    cli = jpu_cli(stack, "osl-erin", "cancel", job["id"][:8])  # a unique prefix will do
    assert cli.returncode == 0, cli
    assert cli.stdout.strip() in (
        f"Cancel requested for job {job['id']} ({state}); SIGTERM now, SIGKILL after 2 s "
        "(time to checkpoint)"  # the grace the configuration gives (JPU_CANCEL_GRACE_S, conftest)
        for state in ("CANCELLING", "CANCELLED")
    ), cli.stdout
    again = erin.cancel(job["id"])  # idempotent while cancelling; 409 once it has ended
    if again.status_code == 409:
        assert_error(again, 409, "ALREADY_TERMINAL")
    else:
        assert again.status_code == 202, again.text
    done = erin.wait(job["id"], TERMINAL, timeout=15)
    assert done["state"] == "CANCELLED" and done["reason"] == "cancelled", done
    assert done["cancel_requested_by"] == "osl-erin" and not done["kill_failed"]
    assert (out / "checkpoint").read_text() == "step 42\n"  # it got SIGTERM and checkpointed

    events = erin.events(job["id"])
    requested, ended = one(events, "JobCancelRequested"), one(events, "JobEnded")
    assert ended["state"] == "CANCELLED"
    assert ended["ts"] - requested["ts"] < 2.0, "ended by its trap, before the SIGKILL grace"
    # F4: a cancelled attempt is charged for the time it held the GPU
    charged = erin.wait(job["id"], lambda j: j["usage_charged"] > 0, what="charged")
    assert charged["usage_charged"] == pytest.approx(ended["usage"], rel=1e-9)

    assert_error(erin.cancel(job["id"]), 409, "ALREADY_TERMINAL")
    cli = jpu_cli(stack, "osl-erin", "cancel", job["id"])  # U1: one line, non-zero exit
    assert cli.returncode != 0 and "ALREADY_TERMINAL" in cli.stderr, cli
    assert len(cli.stderr.strip().splitlines()) == 1, cli.stderr


def test_X8_oom_on_3080ti_escalates_to_4090_with_job_attempt_2(stack: Stack) -> None:
    # the rtx4090s are busy, so the first attempt lands on an rtx3080ti (12 GB)
    carol, dave, bob = stack.api("kdg-carol"), stack.api("kdg-dave"), stack.api("bcg-bob")
    hold = stack.hold("x8-busy")
    busy = [u.submit(hold, tiers=["rtx4090"], name="busy") for u in (carol, carol, carol, dave)]
    for b in busy:
        who = carol if b["user"] == "kdg-carol" else dave
        assert who.wait(b["id"], ["RUNNING"])["placement"]["tier"] == "rtx4090"

    job = bob.submit(OOM_ON_FIRST_ATTEMPT, tiers=["rtx4090", "rtx3080ti"], name="x8")
    retry = bob.wait(
        job["id"],
        # D7: the reason is the dispatcher's, from the cycle after the retry (D8: at once)
        lambda j: j["attempt"] == 2 and j["state"] == "GLOBAL_QUEUE_WAIT" and j["pending_reason"],
        what="attempt 2 waiting for an rtx4090, with the dispatcher's reason",
    )
    # D7: an rtx3080ti is idle but below the raised VRAM floor: it waits for VRAM, not Resources
    assert retry["pending_reason"] == "MinVram" and retry["min_vram_gb"] > 12, retry
    events = bob.events(job["id"])
    first = one(events, "JobDispatched")
    assert first["attempt"] == 1 and first["tier"] == "rtx3080ti", first
    oom = one(events, "JobEnded")
    assert oom["attempt"] == 1 and oom["state"] == "FAILED" and oom["oom"] is True, oom
    scheduled = one(events, "JobRetryScheduled")
    assert scheduled["attempt"] == 2 and scheduled["min_vram_gb"] > 12, scheduled  # X8
    promoted = one(events, "JobPromoted")
    assert retry["queue_entered_at"] == promoted["queue_entered_at"]  # keeps its place

    stack.release("x8-busy")
    done = bob.wait(job["id"], TERMINAL, timeout=20)
    assert done["state"] == "COMPLETED" and done["attempt"] == 2, done
    assert done["placement"]["tier"] == "rtx4090", done
    events = bob.events(job["id"])
    assert len(by_type(events, "JobSubmitted")) == 1  # the user never resubmitted
    assert [(d["attempt"], d["tier"]) for d in by_type(events, "JobDispatched")] == [
        (1, "rtx3080ti"),
        (2, "rtx4090"),
    ]
    assert [(e["attempt"], e["state"]) for e in by_type(events, "JobEnded")] == [
        (1, "FAILED"),
        (2, "COMPLETED"),
    ]
    assert "trained on attempt 2" in (stack.output_dir(job["id"], 2) / "stdout").read_text()
    assert "attempt 1" in (stack.output_dir(job["id"], 1) / "stdout").read_text()


def test_X8_oom_on_largest_tier_fails_with_reason_OOM(stack: Stack) -> None:
    alice = stack.api("bcg-alice")
    script = 'echo "torch.OutOfMemoryError: CUDA out of memory on attempt $JOB_ATTEMPT"; exit 1\n'
    job = alice.submit(script, tiers=["rtx4090"], name="x8-largest")
    done = alice.wait(job["id"], TERMINAL, timeout=20)
    assert done["state"] == "FAILED" and done["reason"] == "OOM" and done["oom"], done
    assert done["attempt"] == 1 and done["placement"]["tier"] == "rtx4090", done
    events = alice.events(job["id"])
    assert not by_type(events, "JobRetryScheduled")  # no tier above 24 GB: nothing to retry on
    assert len(by_type(events, "JobDispatched")) == 1
    assert one(events, "JobEnded")["oom"] is True
