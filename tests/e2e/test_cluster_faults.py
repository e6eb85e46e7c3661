"""Node faults on a 3-node JetStream cluster under load (SPEC O3, O5, E2, E3, F5).

The crash-safety workload (test_crash_safety.py: six users over REST, short/failing/OOM/2-GPU/
cancelled jobs, backfill on) runs against the whole platform as real processes on a 3-node
cluster whose event stream and buckets have 3 replicas, while:
  (a) the node leading the event stream is SIGKILLed and restarted on its store, three times;
  (b) then the node leading it is stopped and stays down until the end (one node of three lost).
With a quorum left that is a leader election, not an outage: no service process may exit (the
supervisor's log shows no restart), every job ends terminal and is charged once, the API and
`python -m jpu.tools.replay` agree with the log. Measured for each loss: stream-leader loss → first
event appended again (by anyone), → first submit accepted over REST (the figures are printed;
BENCHMARKS.md carries them; the test asserts correctness, not speed).

Its own cluster and PostgreSQL, its own stack; a few minutes on a 2-core machine. The servers
are containers started through testcontainers when a container engine answers, embedded processes
otherwise (JPU_TEST_CLUSTER_SERVERS, jpu.testing.servers; CI says `containers`).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest
import pytest_asyncio

from jpu.bus import EventBus
from jpu.config import load_config
from jpu.testing.crash_harness import (
    SEED,
    STACK_ENV,
    Probe,
    Workload,
    own_servers,
    own_stack,
    unprompted_restarts,
    verify,
)
from jpu.testing.e2e_stack import Stack
from jpu.testing.nats_cluster import stream_leader, wait_jetstream
from jpu.testing.servers import NatsServers, PgServer, ServerProvider
from jpu.testing.stack_process import world_searchable_tmpdir

pytestmark = pytest.mark.timeout(480)

LEADER_KILLS = 3
BOUND_S = 60.0  # a loss the platform has not ridden out by then is a failure
TERMINAL_BOUND_S = 150.0


class Servers(NamedTuple):
    cluster: NatsServers
    pg: PgServer
    root: Path


@pytest.fixture(scope="module")
def servers(cluster_server_provider: ServerProvider) -> Iterator[Servers]:
    """Three NATS nodes (the event stream and buckets get 3 replicas) and PostgreSQL."""
    root = world_searchable_tmpdir("jpu-cluster-")
    nodes = cluster_server_provider.nats(root / "nats", size=3)
    print(f"servers: {cluster_server_provider.backend}")
    with own_servers(root, nodes, cluster_server_provider.postgres(root / "pg")) as pg:
        asyncio.run(wait_jetstream(nodes.urls))
        yield Servers(nodes, pg, root)


@pytest_asyncio.fixture(scope="module")
async def stack(servers: Servers) -> AsyncIterator[Stack]:
    env = {
        **STACK_ENV,
        "JPU_NATS_URL": servers.cluster.urls,
        "JPU_STREAM_REPLICAS": "3",
        "JPU_DATABASE_URL": servers.pg.dsn(),
    }
    async for s in own_stack(env, servers.root):
        yield s


@dataclass
class Loss:
    kind: str  # "leader-kill" | "leader-stop"
    node: str
    to_append_s: float | None = None  # → the stream's last seq moved past the loss
    to_submit_s: float | None = None  # → a submit over REST was accepted (200/201)


async def lose_leader(
    kind: str, servers: Servers, bus: EventBus, probe: Probe, wl: Workload
) -> Loss:
    """Take the stream leader's node away; measure until an append and a submit land again."""
    node = await stream_leader(bus.js, bus.stream)
    seq_at = await probe.last_seq() or 0
    t0 = time.monotonic()
    if kind == "leader-kill":
        await asyncio.to_thread(servers.cluster.kill, node)
    else:
        await asyncio.to_thread(servers.cluster.node(node).stop)
    loss = Loss(kind, node)

    async def appended() -> bool:
        last = await probe.last_seq()
        return last is not None and last > seq_at

    async def measure_append() -> None:
        took = await probe.until(appended, BOUND_S, every=0.05)
        loss.to_append_s = None if took is None else time.monotonic() - t0

    async def measure_submit() -> None:
        canary, admin = wl.canary(), wl.clients["admin"]

        async def accepted() -> bool:
            return await admin.try_submit(canary, timeout=15.0) is not None

        took = await probe.until(accepted, BOUND_S, every=0.05)
        loss.to_submit_s = None if took is None else time.monotonic() - t0
        if canary.job_id is None:  # never answered: learn whether it landed (Q6 replay)
            await admin.submit(canary)
        wl.accepted.append(canary)

    await asyncio.gather(measure_append(), measure_submit())
    return loss


async def rejoined(bus: EventBus, node: str) -> None:
    """Until the restarted node is a current replica of the stream again."""
    deadline = time.monotonic() + BOUND_S
    while time.monotonic() < deadline:
        try:
            info = await bus.js.stream_info(bus.stream)
            peers = info.cluster.replicas if info.cluster else None
            if any(p.name == node and p.current for p in peers or []):
                return
        except Exception:
            pass
        await asyncio.sleep(0.2)
    raise AssertionError(f"node {node} did not rejoin the stream within {BOUND_S:.0f} s")


def figures(losses: list[Loss], attr: str) -> dict[str, float | None]:
    got = [v for v in (getattr(x, attr) for x in losses) if v is not None]
    return {
        "median_s": round(statistics.median(got), 2) if got else None,
        "max_s": round(max(got), 2) if got else None,
    }


async def test_O3_one_node_of_three_lost_no_service_exits_and_every_job_ends_charged_once(
    stack: Stack, servers: Servers
) -> None:
    t_start = time.monotonic()
    rng = random.Random(SEED)
    config = load_config(env=stack.env)
    bus = await EventBus.connect(
        config.nats_url, stream=config.stream_name, prefix=config.subject_prefix, name="faults"
    )
    probe = Probe(stack, bus, config.database_url)
    wl = Workload(stack.url, rng)
    losses: list[Loss] = []
    try:
        load = asyncio.create_task(wl.run())
        await asyncio.wait_for(wl.accepted_event.wait(), 60)
        for _ in range(LEADER_KILLS):
            loss = await lose_leader("leader-kill", servers, bus, probe, wl)
            losses.append(loss)
            print(f"{loss}")
            await asyncio.to_thread(servers.cluster.node(loss.node).start)
            await rejoined(bus, loss.node)
            await asyncio.sleep(rng.uniform(1.0, 3.0))  # the workload moves on meanwhile
        stopped = await lose_leader("leader-stop", servers, bus, probe, wl)  # stays down
        losses.append(stopped)
        print(f"{stopped}")
        await asyncio.wait_for(load, 240)
        stuck = await wl.wait_terminal(TERMINAL_BOUND_S)
        verdict = await verify(stack, config, bus, probe, wl, stuck)
    finally:
        await wl.close()
        await probe.close()
        await bus.close()

    exits = unprompted_restarts(stack, [])  # no service was killed: any exit is unprompted
    violations = (
        verdict.violations
        + [f"service exited on a node loss: {dict(exits)}"] * bool(exits)
        + [
            f"{x.kind} of {x.node}: no submit accepted within {BOUND_S:.0f} s"
            for x in losses
            if x.to_submit_s is None
        ]
    )
    summary = {
        "seed": SEED,
        "duration_s": round(time.monotonic() - t_start, 1),
        "jobs": len(verdict.accepted),
        "events": len(verdict.log),
        "charges": verdict.check.stats["charges"],
        "losses": [vars(x) for x in losses],
        "loss_to_first_append": figures(losses, "to_append_s"),
        "loss_to_first_accepted_submit": figures(losses, "to_submit_s"),
        "submits_not_accepted_at_once": sum(1 for s in wl.accepted if len(s.statuses) > 1),
        "unprompted_exits": dict(exits),
        "violations": len(violations),
    }
    print("\ncluster-fault summary:\n" + json.dumps(summary, indent=1))
    for v in violations[:50]:
        print("VIOLATION:", v)
    assert not violations, f"{len(violations)} violations (seed {SEED}):\n" + "\n".join(
        violations[:50]
    )
    assert len(losses) == LEADER_KILLS + 1
