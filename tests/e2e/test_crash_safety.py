"""Crash safety of the running platform (SPEC E2, E3, E6, F4, F5, O5, S2).

A workload over REST — short, failing (exit 3), GPU-OOM (X7/X8: retried on a bigger tier),
2-GPU (reservations, D3/R1) and cancelled jobs (queued and running, X5) from six users in three
labs, with LLM backfill on (B1/B2: preempted by research dispatches) — runs while faults are
injected one after the other, most of them right after (or a random few ms after) the event
that opens the window they aim at: SIGKILL of every service process (the gateway that runs the
projections right after a JobSubmitted and right after a JobStarted was appended, intake, the
dispatcher, the slurm-agent — once the instant it spawned an attempt —, accounting, backfill,
the API-only gateway, then all of them at once), nats-server SIGKILLed and restarted on its
store, PostgreSQL stopped in immediate mode and restarted. The `make run`
supervisor restarts the killed services; the test restarts the servers. Each fault's recovery
time is measured from the injection: for a killed service until its replacement logged that it
serves again (for the projector: and the views applied what the log held at the kill); for a
server until a canary job submitted over REST is accepted with read-your-writes (201 once the
jobs view shows it) and /readyz answers 200.

Once every job is terminal, the invariants are checked from the log itself (jpu.testing.crash):
every accepted job visible and in exactly one terminal state (S2, O5), no attempt dispatched
twice (E2), no GPU held by two jobs at once (R2, P3), every charge landed exactly once with its
amount and every lab's usage chain F3 (F4, F5); the API equals the log's fold (E3); every
attempt the log started ran exactly once (each run leaves a line in its JOB_OUTPUT_DIR); each
kind of job ended as it must (X5–X8); no two jobs' processes ran on one GPU at once; and
`python -m jpu.tools.replay` finds no difference and no projection fault (E6).

Found with it: a slurm-agent killed between spawning an attempt and saving its pid left the job
running unsupervised while the log said NODE_FAIL "never started" and the GPU was handed to the
next job (libs/jpu/backends/local/backend.py, tests/integration/test_local_spawn_crash.py).

Its own NATS and PostgreSQL servers (they are killed), its own stack. Bounded to a few minutes on
a 2-core machine. JPU_CRASH_SEED=<n> replays a run's choices; JPU_CRASH_REPORT=<file> writes the
summary as JSON; JPU_E2E_KEEP=1 keeps the data dir (service logs, server logs, job outputs).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.bus import EventBus
from jpu.config import load_config
from jpu.embedded.base import free_port
from jpu.testing.crash import (
    KillableNats,
    recovery_summary,
)
from jpu.testing.crash_harness import (
    PLAN,
    RECOVERY_BOUND_S,
    SEED,
    STACK_ENV,
    TERMINAL_BOUND_S,
    Faults,
    Probe,
    Servers,
    Workload,
    own_servers,
    own_stack,
    unprompted_restarts,
    verify,
)
from jpu.testing.e2e_stack import Stack
from jpu.testing.stack_process import world_searchable_tmpdir

pytestmark = pytest.mark.timeout(480)


@pytest.fixture(scope="module")
def servers() -> Iterator[Servers]:
    root = world_searchable_tmpdir("jpu-crash-")
    nats = KillableNats(root / "nats", port=free_port())
    with own_servers(root, nats) as pg:
        yield Servers(root, nats, pg)


@pytest_asyncio.fixture(scope="module")
async def stack(servers: Servers) -> AsyncIterator[Stack]:
    """Overrides tests/e2e/conftest.py's: this stack runs on servers the test may kill."""
    env = {**STACK_ENV, "JPU_NATS_URL": servers.nats.url, "JPU_DATABASE_URL": servers.pg.dsn()}
    async for s in own_stack(env, servers.root):
        yield s


async def test_E3_O5_F5_crash_safety_kills_and_server_restarts_under_load_keep_log_and_views_exact(
    stack: Stack, servers: Servers
) -> None:
    t_start, t_wall = time.monotonic(), time.time()
    rng = random.Random(SEED)
    config = load_config(env=stack.env)
    bus = await EventBus.connect(
        config.nats_url, stream=config.stream_name, prefix=config.subject_prefix, name="crash"
    )
    probe = Probe(stack, bus, config.database_url)
    wl = Workload(stack.url, rng)
    faults = Faults(stack, servers, probe, rng, wl)
    try:
        load = asyncio.create_task(wl.run())
        load_done: list[float] = []
        load.add_done_callback(lambda _: load_done.append(time.monotonic()))
        await asyncio.wait_for(wl.accepted_event.wait(), 60)
        await faults.run(PLAN)
        t_faults = time.monotonic()
        await asyncio.wait_for(load, 180)
        t_load = load_done[0]
        stuck = await wl.wait_terminal(TERMINAL_BOUND_S)

        verdict = await verify(stack, config, bus, probe, wl, stuck)
    finally:
        await wl.close()
        await probe.close()
        await bus.close()

    violations = verdict.violations + [
        f"{f.kind} ({f.trigger}) did not recover within {RECOVERY_BOUND_S:.0f} s"
        for f in faults.done
        if f.recovered_s is None
    ]
    log, check, accepted = verdict.log, verdict.check, verdict.accepted
    kinds = Counter(s.kind for s in wl.accepted)
    cancel_found = Counter(
        str(check.state.jobs[str(s.job_id)].cancel_from)
        for s in wl.accepted
        if s.kind.startswith("cancel") and str(s.job_id) in check.state.jobs
    )
    stats = check.stats
    summary = {
        "seed": SEED,
        "duration_s": round(time.monotonic() - t_start, 1),
        "fault_phase_s": round(t_faults - t_start, 1),
        "workload_s": round(t_load - t_start, 1),
        "jobs": len(accepted),
        "jobs_by_kind": dict(sorted(kinds.items())),
        "final_states": {
            k.removeprefix("final:"): v for k, v in sorted(stats.items()) if k.startswith("final:")
        },
        "events": len(log),
        "submits_retried": sum(1 for s in wl.accepted if len(s.statuses) > 1),
        "submits_answered_by_replay": sum(1 for s in wl.accepted if s.statuses[-1] == "200"),
        "coverage": {
            "reservations": stats["reservations"],
            "demoted": stats["reservation_released:demoted"],
            "swaps": stats["reservation_released:swap"],
            "oom_retries": stats["oom_retries"],
            "oom_declined": stats["oom_declined"],
            "backfill_started": stats["backfill_started"],
            "backfill_preempted": stats["backfill_ended:preempted"],
            "cancels": stats["cancel_requests"],
            "cancel_found": dict(sorted(cancel_found.items())),
            "cancel_running_missed": len(wl.cancel_missed),
        },
        "charges": stats["charges"],
        "faults": [
            {
                "kind": f.kind,
                "t_s": round(f.at - t_wall, 1),
                "trigger": f.trigger,
                "recovered_s": None if f.recovered_s is None else round(f.recovered_s, 2),
            }
            for f in faults.done
        ],
        "recovery": recovery_summary(faults.done),
        "unprompted_restarts": dict(unprompted_restarts(stack, faults.done)),
        "replay": verdict.replay_out.strip().splitlines()[-1:],
        "violations": len(violations),
    }
    print("\ncrash-safety summary:\n" + json.dumps(summary, indent=1))
    for v in violations[:50]:
        print("VIOLATION:", v)
    if os.environ.get("JPU_CRASH_REPORT"):
        Path(os.environ["JPU_CRASH_REPORT"]).write_text(
            json.dumps({**summary, "violation_list": violations}, indent=1)
        )
    assert not violations, f"{len(violations)} violations (seed {SEED}):\n" + "\n".join(
        violations[:50]
    )
    # what the run must have exercised for its verdict to mean anything
    assert len(faults.done) == len(PLAN)
    queued = ("PERSONAL_QUEUE_WAIT", "GLOBAL_QUEUE_WAIT", "RESERVING")
    assert cancel_found["RUNNING"] and sum(cancel_found[q] for q in queued), cancel_found
    assert stats["reservations"] and stats["backfill_ended:preempted"], summary["coverage"]
