"""Reservations on the running platform (SPEC D3, D5, D7, R1, R2): a 2-GPU job of the
lowest-usage lab is not starved by other labs' 1-GPU jobs that keep arriving.

Its own stack (fresh usage, default cluster: 2 × 2 rtx4090 + 2 × 2 rtx3080ti).
"""

from __future__ import annotations

from typing import Any

from jpu.testing.e2e_stack import TERMINAL, Api, Stack, by_type, one, wait_until

STACK_ENV = {"JPU_CYCLE_S": "5"}  # reservations start and grow on events (D8), not on the clock


def held_gpus(x_events: list[dict[str, Any]], t: float) -> set[tuple[str, int]]:
    """The GPUs X's reservation held at time t, from its ReservationStarted/Grown/Released."""
    held: set[tuple[str, int]] = set()
    for e in x_events:
        if e["ts"] > t:
            break
        if e["type"] in ("ReservationStarted", "ReservationGrown"):
            held = {(e["node"], g) for g in e["gpus"]}
        elif e["type"] in ("ReservationReleased", "JobDispatched"):
            held = set()
    return held


def test_R1_two_gpu_job_reserves_then_runs_while_other_labs_single_jobs_arrive(
    stack: Stack,
) -> None:
    carol, dave, erin, frank = (
        stack.api(u) for u in ("kdg-carol", "kdg-dave", "osl-erin", "osl-frank")
    )
    alice, admin = stack.api("bcg-alice"), stack.api("admin")
    owner: dict[str, Api] = {}

    def submit(user: Api, command: str, **kw: Any) -> str:
        job_id = str(user.submit(command, **kw)["id"])
        owner[job_id] = user
        return job_id

    # 1. Other labs fill all 8 GPUs, each job held until the test releases it.
    fill = [
        submit(u, stack.hold(f"fill-{i}"), name=f"fill-{i}")
        for i, u in enumerate([carol, carol, carol, dave, dave, dave, erin, erin])
    ]
    at: dict[tuple[str, int], str] = {}
    for j in fill:
        p = owner[j].wait(j, ["RUNNING"])["placement"]
        at[(p["node"], p["gpus"][0])] = j
    assert len(at) == 8, at

    # 2. BCG (usage 0, the lowest) submits a 2-GPU job: rank 1, nothing idle, it waits.
    x = submit(alice, "sleep 1", num_gpus=2, name="two-gpus")
    alice.wait(x, lambda j: j["state"] == "GLOBAL_QUEUE_WAIT" and j["rank"] == 1, what="rank 1")
    assert [q["job_id"] for q in admin.get("/v1/queue")["queue"]][:1] == [x]

    # 3. One rtx4090 frees: rank 1 with num_gpus >= 2 starts a reservation there (D3.c, R1).
    first_node = "gpu-4090x2-01"
    fill_0, fill_1 = at[(first_node, 0)], at[(first_node, 1)]
    stack.release(_gate(at, fill, first_node, 0))
    reserving = alice.wait(
        x,
        # D7: the reason is the dispatcher's, published right after the cycle's appends
        lambda j: (
            j["state"] == "RESERVING"
            and j["reservation"] is not None
            and j["pending_reason"] is not None
        ),
        what="RESERVING with a reservation and the dispatcher's reason",
    )
    res = reserving["reservation"]
    assert (res["node"], res["tier"], res["gpus"]) == (first_node, "rtx4090", [0]), res
    assert reserving["pending_reason"] == "Reservation" and reserving["rank"] == 1, reserving
    # the pool view is another projection of the same log: it shows the reservation too
    wait_until(
        lambda: stack.placement(first_node)["reserved"] == [{"job_id": x, "gpus": [0]}],
        10,
        lambda: f"the reservation in GET /v1/placements: {stack.placement(first_node)}",
    )
    assert stack.placement(first_node)["idle"] == 0  # R2: reserved GPUs are idle for no one

    # 4. Other labs keep submitting 1-GPU jobs; they rank below X and must not take GPU 0.
    late = [submit(frank, stack.hold("late"), name=f"late-{i}") for i in range(3)]
    # every late job ranked: a dispatch cycle has decided on them (a positive signal, not a pause)
    wait_until(lambda: all(frank.job(j)["rank"] for j in late), 10, "the late jobs ranked")
    for j in late:
        job = frank.job(j)
        assert job["state"] == "GLOBAL_QUEUE_WAIT" and job["rank"] > 1, job
    assert alice.job(x)["state"] == "RESERVING"

    # 5. A GPU X cannot use now (another node) frees: a lower-ranked job may start there (D5).
    stack.release(_gate(at, fill, "gpu-3080tix2-01", 0))
    started = wait_until(
        lambda: [j for j in late if frank.job(j)["state"] == "RUNNING"],
        10,
        "a late 1-GPU job to start on the freed rtx3080ti",
    )
    assert frank.job(started[0])["placement"]["node"] == "gpu-3080tix2-01"
    assert alice.job(x)["state"] == "RESERVING"
    late.append(submit(carol, stack.hold("late"), name="late-carol"))

    # 6. The reserved node's other GPU frees: X absorbs it and runs on one node with 2 GPUs.
    stack.release(_gate(at, fill, first_node, 1))
    running = alice.wait(x, ["RUNNING", "COMPLETED"], what="the 2-GPU job dispatched")
    assert running["placement"] == {"node": first_node, "tier": "rtx4090", "gpus": [0, 1]}
    x_events = alice.events(x)
    assert [e["type"] for e in x_events][:3] == [
        "JobSubmitted",
        "JobPromoted",
        "ReservationStarted",
    ], [e["type"] for e in x_events]
    released = one(x_events, "ReservationReleased")
    assert released["reason"] == "dispatched" and released["charged_now"] is False  # R4/F4
    dispatched = one(x_events, "JobDispatched")
    assert (dispatched["node"], dispatched["gpus"]) == (first_node, [0, 1])
    # D8: the reservation started, and the job dispatched, as the GPUs freed (cycle_s is 5 s)
    freed = [one(owner[j].events(j), "JobEnded")["ts"] for j in (fill_0, fill_1)]
    assert 0 <= one(x_events, "ReservationStarted")["ts"] - freed[0] < 1.0, (freed, x_events)
    assert 0 <= dispatched["ts"] - freed[1] < 1.0, (freed, x_events)

    # 7. No lower-ranked job was ever dispatched onto a GPU X held at that moment (D5, R2).
    stack.release("late")
    for j in fill + late:
        for d in by_type(owner[j].events(j), "JobDispatched"):
            taken = {(d["node"], g) for g in d["gpus"]}
            assert not taken & held_gpus(x_events, d["ts"]), (j, d, x_events)
    done = alice.wait(x, TERMINAL, timeout=15)
    assert done["state"] == "COMPLETED", done
    # F2/F4: the reservation's held time is charged with the run, at the end
    ended = one(alice.events(x), "JobEnded")
    assert ended["gpu_seconds_reserved"] > 0, ended


def _gate(at: dict[tuple[str, int], str], fill: list[str], node: str, gpu: int) -> str:
    """The gate name of the filler running on (node, gpu)."""
    return f"fill-{fill.index(at[(node, gpu)])}"
