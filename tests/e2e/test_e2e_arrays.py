"""Job arrays through the running platform (SPEC Q7), over HTTP, checked against the log itself.

One stack (default cluster: 8 GPUs) with a per-user limit of 8 slots, so an array's `%N` is what
binds; small array limits so the refusals are cheap to reach.
"""

from __future__ import annotations

from typing import Any

import msgspec

from jpu.bus import Delivered, EventBus
from jpu.config import load_config
from jpu.domain.cluster import ClusterState, evolve
from jpu.events import JobSubmitted, UsageCharged
from jpu.testing.e2e_stack import Stack, jpu_cli, wait_until

STACK_ENV = {
    "JPU_MAX_ACTIVE_JOBS": "8",
    "JPU_ARRAY_MAX_TASKS": "200",
    "JPU_ARRAY_MAX_QUEUED_PER_USER": "250",
}


async def whole_log(stack: Stack) -> list[Delivered]:
    """Every event of the stack's log, in stream order (what an auditor replays, E6)."""
    bus = await EventBus.connect(
        stack.env["JPU_NATS_URL"],
        stream=stack.env["JPU_STREAM_NAME"],
        prefix=stack.env["JPU_SUBJECT_PREFIX"],
        name="e2e-arrays",
    )
    try:
        return [d async for d in bus.replay()]
    finally:
        await bus.close()


def array_states(stack: Stack, user: str, array_id: str) -> dict[str, int]:
    return dict(stack.api(user).job(array_id)["states"])


async def test_Q7_array_of_100_tasks_throttled_never_more_than_4_hold_slots_S1(
    stack: Stack,
) -> None:
    alice = stack.api("bcg-alice")
    r = alice.post_job({"name": "sweep", "command": "true", "num_gpus": 1, "array": "0-99%4"})
    assert r.status_code == 201, r.text
    array = r.json()
    aid = array["id"]
    assert len(array["tasks"]) == 100 and array["tasks"][7] == f"{aid}_7", array
    wait_until(
        lambda: array_states(stack, "bcg-alice", aid) == {"COMPLETED": 100},
        240,
        lambda: f"every task COMPLETED: {array_states(stack, 'bcg-alice', aid)}",
    )

    log = await whole_log(stack)
    # ONE event appended for the submit: the array's, on the array's own subject
    submits = [d for d in log if isinstance(d.event, JobSubmitted) and aid in d.event.job_id]
    assert len(submits) == 1 and submits[0].event.job_id == aid, submits
    assert submits[0].subject.endswith(f".job.{aid}")
    # S1 at every point of the log: the slot-holding tasks of the array, folded event by event
    state = ClusterState.new(load_config(None))
    most = 0
    for d in log:
        evolve(state, d)
        holding = sum(1 for j in state.jobs.values() if j.array_id == aid and j.holds_slot)
        most = max(most, holding)
        assert holding <= 4, f"{holding} tasks hold slots after seq {d.seq} ({d.event})"
    assert most == 4  # the throttle was reached, not just never tested
    # every task charged once, for its one attempt (F4)
    charges: dict[str, int] = {}
    for d in log:
        if isinstance(d.event, UsageCharged) and d.event.job_id and aid in d.event.job_id:
            charges[d.event.job_id] = charges.get(d.event.job_id, 0) + 1
    assert charges == {f"{aid}_{k}": 1 for k in range(100)}
    # each task is a job of its own: its audit trail starts with its (derived) submit
    trail = [e["type"] for e in alice.events(f"{aid}_42")]
    assert trail[:2] == ["JobSubmitted", "JobPromoted"] and trail[-1] == "JobEnded", trail


def test_Q7_task_environment_names_array_and_index(stack: Stack) -> None:
    bob = stack.api("bcg-bob")
    show = 'echo "$JPU_ARRAY_JOB_ID $JPU_ARRAY_TASK_ID $SLURM_ARRAY_JOB_ID $SLURM_ARRAY_TASK_ID"'
    r = bob.post_job({"command": show, "num_gpus": 1, "array": [3, 5]})
    assert r.status_code == 201, r.text
    aid = r.json()["id"]
    wait_until(lambda: array_states(stack, "bcg-bob", aid) == {"COMPLETED": 2}, 60, "2 tasks")
    out = bob.http.get(f"/v1/jobs/{aid}_5/logs")
    assert out.status_code == 200, out.text
    assert out.text.strip() == f"{aid} 5 {aid} 5"
    task = bob.job(f"{aid}_3")
    assert task["array_id"] == aid and task["array_task"] == 3
    # the CLI: the array's output task by task, and the array as one row of `jpu jobs`
    logs = jpu_cli(stack, "bcg-bob", "logs", aid)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout == f"==> {aid}_3 <==\n{aid} 3 {aid} 3\n==> {aid}_5 <==\n{aid} 5 {aid} 5\n"
    jobs = jpu_cli(stack, "bcg-bob", "jobs")
    assert jobs.returncode == 0, jobs.stderr
    row = next(line for line in jobs.stdout.splitlines() if line.startswith(aid))
    assert row.split()[:1] == [f"{aid}_[3,5]"] and "COMPLETED:2" in row, jobs.stdout
    shown = jpu_cli(stack, "bcg-bob", "show", aid)
    assert "Tasks" in shown.stdout and f"{aid}_[3,5]" in shown.stdout, shown.stdout


def test_Q7_jpu_queue_groups_waiting_tasks_with_the_throttle_ID_brackets_percent_N(
    stack: Stack,
) -> None:
    """squeue's form: the tasks %N holds back in the personal queue are one row `ID_[1-2%1]`."""
    dave = stack.api("kdg-dave")
    r = dave.post_job({"command": stack.hold("q7-queue"), "num_gpus": 1, "array": "0-2%1"})
    assert r.status_code == 201, r.text
    aid = r.json()["id"]
    dave.wait(f"{aid}_0", ["RUNNING"])
    assert dave.job(f"{aid}_1")["array_throttle"] == 1
    queue = jpu_cli(stack, "kdg-dave", "queue")
    assert queue.returncode == 0, queue.stderr
    rows = [line.split() for line in queue.stdout.splitlines() if aid in line]
    assert any(f"{aid}_[1-2%1]" in row for row in rows), queue.stdout
    stack.release("q7-queue")
    wait_until(lambda: array_states(stack, "kdg-dave", aid) == {"COMPLETED": 3}, 60, "3 tasks")


async def test_Q7_array_refusals_are_422_naming_array_nothing_appended(stack: Stack) -> None:
    carol = stack.api("kdg-carol")
    before = len(await whole_log(stack))
    for spec in ["0-500", "0-x", "5-1", [1, "2"], "0-9%0", "1,1"]:
        r = carol.post_job({"command": "true", "num_gpus": 1, "array": spec})
        assert r.status_code == 422, (spec, r.text)
        error = r.json()["error"]
        assert error["code"] == "VALIDATION_ERROR" and error["details"]["field"] == "array", error
    # queued tasks per user: 150 waiting (%1 keeps them queued) + 150 more would pass 250
    gate = stack.hold("refusals")
    first = carol.post_job({"command": gate, "num_gpus": 1, "array": "0-149%1"})
    assert first.status_code == 201, first.text
    r = carol.post_job({"command": "true", "num_gpus": 1, "array": "0-149"})
    assert r.status_code == 422 and r.json()["error"]["details"]["field"] == "array", r.text
    log = await whole_log(stack)
    mine = [d for d in log[before:] if isinstance(d.event, JobSubmitted)]
    assert [d.event.job_id for d in mine] == [first.json()["id"]]  # only the accepted array
    cancelled = carol.cancel(first.json()["id"])
    assert cancelled.status_code == 202, cancelled.text


def test_Q7_cancel_one_task_then_the_whole_array(stack: Stack) -> None:
    dave = stack.api("kdg-dave")
    r = dave.post_job({"command": stack.hold("cancel"), "num_gpus": 1, "array": "0-9%2"})
    assert r.status_code == 201, r.text
    aid = r.json()["id"]
    wait_until(
        lambda: array_states(stack, "kdg-dave", aid).get("RUNNING") == 2, 30, "2 tasks running"
    )
    # D7: a task beyond %2 waits in the personal queue for its array, not for a slot (Q5)
    waiting = dave.job(f"{aid}_5")
    assert waiting["state"] == "PERSONAL_QUEUE_WAIT", waiting
    assert waiting["pending_reason"] == "ArrayThrottle", waiting
    queue = dave.get("/v1/queue", user="kdg-dave")["queue"]
    assert {e["pending_reason"] for e in queue if e["job_id"].startswith(aid)} == {"ArrayThrottle"}
    one = dave.cancel(f"{aid}_7")  # a task is a job: cancelled alone
    assert one.status_code == 202, one.text
    dave.wait(f"{aid}_7", ["CANCELLED"])
    assert array_states(stack, "kdg-dave", aid)["RUNNING"] == 2
    whole = dave.cancel(aid)
    assert whole.status_code == 202, whole.text
    body: dict[str, Any] = whole.json()
    assert body["id"] == aid and "cancel_grace_s" in body
    wait_until(
        lambda: array_states(stack, "kdg-dave", aid) == {"CANCELLED": 10},
        30,
        lambda: f"every task CANCELLED: {array_states(stack, 'kdg-dave', aid)}",
    )
    again = dave.cancel(aid)  # nothing left to cancel: like an ended job
    assert again.status_code == 409, again.text
    assert msgspec.json.decode(again.content)["error"]["code"] == "ALREADY_TERMINAL"
