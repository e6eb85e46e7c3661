"""The slurm-agent over real NATS JetStream and the real Slurm test cluster (SPEC §5, X6, O5):
the same agent that runs the local backend, with `slurm_backend: slurm`."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest_asyncio

from jpu.backends import LaunchSpec, make_backend
from jpu.backends.slurm.backend import SlurmBackend
from jpu.bus import EventBus
from jpu.config import Config, Node, load_config
from jpu.events import (
    JobCancelRequested,
    JobEnded,
    JobStarted,
    NodeInventoryObserved,
)
from jpu.testing.agent_world import (
    NODE,
    TIER,
    AgentWorld,
    dispatched,
    ended,
    event,
    of,
    submitted,
    wait_events,
)
from jpu.testing.slurm_env import SlurmEnv, wait_end, wait_file
from jpu.testing.slurm_fixtures import SlurmCluster


@dataclass
class World(AgentWorld):
    env: SlurmEnv | None = None

    @property
    def slurm(self) -> SlurmEnv:
        assert self.env is not None
        return self.env


def cluster_config(bus: EventBus, env: SlurmEnv, cluster: SlurmCluster) -> Config:
    nodes = [Node(name=n, gpus={tier: count}) for n, (tier, count) in cluster.nodes.items()]
    return msgspec.structs.replace(
        load_config(), stream_name=bus.stream, subject_prefix=bus.prefix,
        data_dir=str(env.data_dir), nodes=nodes, slurm_backend="slurm",
    )  # fmt: skip


@pytest_asyncio.fixture
async def world(
    bus: EventBus, slurm: SlurmEnv, slurm_cluster: SlurmCluster
) -> AsyncIterator[World]:
    config = cluster_config(bus, slurm, slurm_cluster)
    backend = make_backend(config, {"JPU_SLURM_CONF": slurm_cluster.conf})
    assert isinstance(backend, SlurmBackend)  # the real Slurm backend, by configuration (X9)
    slurm.backends.append(backend)
    w = World(bus, config, backend, slurm.out_root, env=slurm)
    try:
        yield w
    finally:
        await w.stop_agents()


async def test_X6_a_dispatch_runs_on_slurm_and_its_end_is_recorded(world: World) -> None:
    job = f"sa{time.monotonic_ns()}"
    await world.append(*submitted(job, "sleep 1.2", num_gpus=2), dispatched(job, [0, 1]))
    world.start_agent()
    events = await wait_events(world.bus, job, ended)
    (started,) = of(events, JobStarted)
    (end,) = of(events, JobEnded)
    assert started.backend_job_id.isdigit()  # the Slurm job id is recorded (X6)
    assert started.isolation in ("uid+netns", "none")
    assert (
        end.state == "COMPLETED"
        and end.exit_code == 0
        and end.backend_job_id == started.backend_job_id
    )
    assert (end.node, end.tier, end.gpus) == (NODE, TIER, [0, 1])
    assert 2 * 1.2 <= end.gpu_seconds_run < 2 * 4.0  # Slurm's whole seconds, within 1 s
    inventory = [d.event async for d in world.bus.replay(filter_subject=f"{world.bus.prefix}.>")]
    observed = {e.node: e for e in inventory if isinstance(e, NodeInventoryObserved)}
    assert set(observed) == set(world.slurm.cluster.nodes)


async def test_P2_a_configured_node_slurm_does_not_have_is_reported_down(world: World) -> None:
    ghost = Node(name="gpu-ghost-01", gpus={"rtx3080ti": 2})  # configured, unknown to Slurm
    world.config = msgspec.structs.replace(world.config, nodes=[*world.config.nodes, ghost])
    world.start_agent()
    subject = f"{world.bus.prefix}.inventory.{ghost.name}"
    deadline = time.monotonic() + 20
    while not (seen := [d.event async for d in world.bus.replay(filter_subject=subject)]):
        assert time.monotonic() < deadline, "no inventory of the configured node"
        await asyncio.sleep(0.2)
    (inv,) = seen
    assert isinstance(inv, NodeInventoryObserved)
    assert (inv.state, inv.gpus, inv.down) == ("down", {"rtx3080ti": 2}, {"rtx3080ti": [0, 1]})


async def test_X7_a_cuda_oom_on_slurm_ends_failed_with_oom(world: World) -> None:
    job = f"so{time.monotonic_ns()}"
    cmd = 'echo "torch.OutOfMemoryError: CUDA out of memory." >&2\nexit 1\n'
    await world.append(*submitted(job, cmd), dispatched(job, [1]))
    world.start_agent()
    (end,) = of(await wait_events(world.bus, job, ended), JobEnded)
    assert end.state == "FAILED" and end.exit_code == 1
    assert end.oom and end.reason == "OOM" and not end.host_oom


async def test_X5_cancel_through_the_agent_lets_the_slurm_job_checkpoint(world: World) -> None:
    job = f"sc{time.monotonic_ns()}"
    cmd = "trap 'echo ok > \"$JOB_OUTPUT_DIR/ckpt\"; exit 0' TERM\ntouch ready\nsleep 60 & wait\n"
    await world.append(*submitted(job, cmd), dispatched(job, [0]))
    world.start_agent()
    await wait_file(world.slurm.out_root / job / "1" / "ready")  # running, its trap set
    await world.append(event(JobCancelRequested, job_id=job, by="alice"))
    (end,) = of(await wait_events(world.bus, job, ended), JobEnded)
    assert end.state == "CANCELLED" and end.reason == "cancelled" and not end.kill_failed
    assert (world.slurm.out_root / job / "1" / "ckpt").read_text() == "ok\n"


async def test_O5_an_agent_killed_mid_job_is_replaced_and_the_new_one_readopts_it(
    world: World, nats_url: str
) -> None:
    job = f"sr{time.monotonic_ns()}"
    await world.append(*submitted(job, "sleep 4\nexit 5\n"), dispatched(job, [1]))
    proc = await world.spawn_agent_process(nats_url, {"JPU_SLURM_CONF": world.slurm.cluster.conf})
    try:
        await wait_events(world.bus, job, lambda ev: bool(of(ev, JobStarted)), timeout=30)
    finally:
        proc.send_signal(signal.SIGKILL)  # a crash: no drain, no goodbye
        await proc.wait()
    (started,) = of(await world.bus.job_events(job), JobStarted)
    assert started.backend_job_id in await world.backend.running()  # a fresh backend sees it
    world.start_agent()  # a new agent and backend on the same log and data dir
    events = await wait_events(world.bus, job, ended)
    assert len(of(events, JobStarted)) == 1  # re-adopted, never launched again
    (end,) = of(events, JobEnded)
    assert end.state == "FAILED" and end.exit_code == 5  # the real exit of the same Slurm job
    assert 4.0 <= end.gpu_seconds_run < 7


async def test_O5_a_slurm_job_the_log_does_not_account_for_is_cancelled(world: World) -> None:
    spec = world.slurm.spec("sleep 60", job_id=f"ghost{time.monotonic_ns()}")
    bid = await world.backend.submit(spec)
    world.start_agent(cancel_grace_s=0.5)
    status = await wait_end(world.backend, bid, 15)
    assert status.state == "CANCELLED"


async def test_O5_an_attempt_submitted_but_not_recorded_is_adopted_not_resubmitted(
    world: World,
) -> None:
    job = f"sw{time.monotonic_ns()}"
    cmd = 'echo run >> "$JOB_OUTPUT_DIR/runs"; sleep 0.5'
    await world.append(*submitted(job, cmd), dispatched(job, [0]))
    spec = LaunchSpec(  # an agent died between sbatch and the JobStarted append
        job_id=job, attempt=1, user="alice", node=NODE, tier=TIER, gpus=[0], num_gpus=1,
        command=cmd, output_dir=str(world.slurm.out_root / job / "1"), partition=TIER,
    )  # fmt: skip
    bid = await world.backend.submit(spec)
    world.start_agent()
    events = await wait_events(world.bus, job, ended)
    (started,) = of(events, JobStarted)
    assert started.backend_job_id == bid
    assert Path(world.slurm.out_root / job / "1" / "runs").read_text() == "run\n"
