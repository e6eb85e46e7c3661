"""Dispatcher failover on the running platform (SPEC E4, O5): the leader is SIGKILLed while jobs
keep arriving; a standby dispatcher process takes over; nothing is dispatched twice.

Its own stack: the fault is injected into its processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

from jpu.testing.e2e_stack import TERMINAL, Api, Stack, by_type, wait_until

USERS = ("bcg-alice", "bcg-bob", "kdg-carol", "kdg-dave", "osl-erin", "osl-frank")


def leading(stack: Stack, *logs: str) -> list[tuple[float, str]]:
    """(time, holder) of every dispatcher that logged taking the lead (holders embed the pid)."""
    return sorted(
        (e["ts"], e["holder"])
        for log in logs
        for e in stack.service_log(log)
        if e["msg"] == "leading"
    )


BOTH = ("dispatcher", "dispatcher-standby")


def test_E4_dispatcher_leader_killed_standby_takes_over_no_double_dispatch(stack: Stack) -> None:
    [leader] = stack.service_pids("dispatcher")
    wait_until(lambda: leading(stack, "dispatcher"), 10, "the supervised dispatcher to lead")
    assert f"-{leader}-" in leading(stack, "dispatcher")[0][1]

    log_path = stack.data_dir / "logs" / "dispatcher-standby.log"
    with open(log_path, "wb") as out:
        standby = subprocess.Popen(
            [sys.executable, "-m", "jpu_services.dispatcher"],
            env={**stack.env, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        wait_until(
            lambda: any(e["msg"] == "connected" for e in stack.service_log("dispatcher-standby")),
            15,
            "the standby dispatcher to connect",
        )
        owner: dict[str, Api] = {}
        turn = iter(range(10**6))

        def submit_wave(n: int, tag: str) -> list[str]:
            ids = []
            for _ in range(n):
                api = stack.api(USERS[next(turn) % len(USERS)])
                job_id = str(api.submit("sleep 1", name=tag)["id"])
                owner[job_id] = api
                ids.append(job_id)
            return ids

        first = submit_wave(6, "before")
        for j in first:
            owner[j].wait(j, lambda x: x["placement"] is not None, what="dispatched")
        assert not leading(stack, "dispatcher-standby"), "the standby acted while the leader lived"

        # The leader dies with work in flight; more work keeps arriving.
        during = submit_wave(4, "during")
        os.kill(leader, signal.SIGKILL)
        killed_at = time.time()
        after = submit_wave(6, "after")
        # Another dispatcher takes the lead once the dead leader's lease expires: the standby,
        # or the supervisor's restart of the killed one (O5) if its first try comes first.
        new = wait_until(
            lambda: [x for x in leading(stack, *BOTH) if x[0] > killed_at],
            10,
            lambda: f"a new leader; leading so far: {leading(stack, *BOTH)}",
        )
        takeover_s = new[0][0] - killed_at
        assert takeover_s < 6.0, takeover_s  # lease TTL 3 s + renewal 1 s, plus a loaded machine
        assert f"-{leader}-" not in new[0][1]

        for j in first + during + after:
            done = owner[j].wait(j, TERMINAL, timeout=40)
            assert done["state"] == "COMPLETED" and done["attempt"] == 1, done
        # Exactly one JobDispatched per (job, attempt), across both dispatchers.
        counts = Counter(
            (j, d["attempt"])
            for j in first + during + after
            for d in by_type(owner[j].events(j), "JobDispatched")
        )
        assert set(counts) == {(j, 1) for j in first + during + after}
        assert max(counts.values()) == 1, {k: v for k, v in counts.items() if v > 1}
        # The new leader dispatched the work that waited (E4). A liveness bound only, generous
        # for a loaded machine: the time itself is measured by `bench_failover.py --dispatcher`.
        first_dispatch_s = (
            min(
                d["ts"]
                for j in during + after
                for d in by_type(owner[j].events(j), "JobDispatched")
                if d["ts"] > killed_at
            )
            - killed_at
        )
        assert first_dispatch_s < 20.0, first_dispatch_s

        # The supervisor restarted the killed dispatcher (O5); of the three dispatcher processes
        # that ever ran, one led at a time: the first until killed, then exactly one other (E4).
        wait_until(lambda: len(stack.service_pids("dispatcher")) == 2, 15, "a restarted dispatcher")
        holders = [h for _, h in leading(stack, *BOTH)]
        assert len(holders) == 2 and f"-{leader}-" in holders[0], holders
        print(
            f"takeover after {takeover_s:.2f}s by {holders[1]} (standby pid {standby.pid}), "
            f"first dispatch after {first_dispatch_s:.2f}s"
        )
    finally:
        standby.send_signal(signal.SIGTERM)
        try:
            standby.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(standby.pid, signal.SIGKILL)
            standby.wait()
