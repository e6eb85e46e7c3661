"""SPEC X4a, X7, X8 through the running platform with `isolation: container` (real podman): a
job's attempts run in containers, the job says so, and a GPU OOM printed inside the container is
still the attempt's verdict and sends the job to a bigger tier (the user never resubmits)."""

from __future__ import annotations

from jpu.testing.e2e_stack import TERMINAL, Stack, by_type

STACK_ENV = {"JPU_ISOLATION": "container"}
OOM_THEN_TRAIN = """echo "attempt $JOB_ATTEMPT as $(id -u)"
if [ "$JOB_ATTEMPT" = 1 ]; then
  echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB" >&2
  exit 1
fi
echo "trained on attempt $JOB_ATTEMPT"
"""


def test_X8_oom_inside_the_container_retries_on_the_bigger_tier(stack: Stack) -> None:
    erin = stack.api("osl-erin")
    users = [stack.api("kdg-carol"), stack.api("kdg-dave")] * 2  # within max_active_jobs
    # the four rtx4090s are taken, so attempt 1 lands on an rtx3080ti (12 GB)
    busy = [(u, u.submit("sleep 600", tiers=["rtx4090"], name="busy")) for u in users]
    for u, b in busy:
        assert u.wait(b["id"], ["RUNNING"])["isolation"] == "container:podman"
    job = erin.submit(OOM_THEN_TRAIN, tiers=["rtx4090", "rtx3080ti"], name="x8-in-container")
    erin.wait(job["id"], lambda j: j["attempt"] == 2, what="attempt 2 scheduled after the OOM")
    for u, b in busy:
        assert u.cancel(b["id"]).status_code in (200, 202)
    done = erin.wait(job["id"], TERMINAL, timeout=60)
    assert done["state"] == "COMPLETED" and done["attempt"] == 2, done
    assert done["isolation"] == "container:podman"  # the isolation the attempt actually got
    events = erin.events(job["id"])
    started = by_type(events, "JobStarted")
    assert [s["isolation"] for s in started] == ["container:podman"] * 2
    ended = by_type(events, "JobEnded")
    assert (ended[0]["state"], ended[0]["oom"]) == ("FAILED", True)  # X7 read from inside
    assert [d["tier"] for d in by_type(events, "JobDispatched")] == ["rtx3080ti", "rtx4090"]
    assert len(by_type(events, "JobSubmitted")) == 1
    assert "trained on attempt 2" in (stack.output_dir(job["id"], 2) / "stdout").read_text()
