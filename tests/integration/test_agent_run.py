"""The slurm-agent over real NATS JetStream and real local processes (SPEC §5, E2, O5)."""

from __future__ import annotations

import asyncio
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest_asyncio

from jpu.backends import LaunchSpec
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.bus import EventBus
from jpu.config import Config, load_config
from jpu.events import (
    JobCancelRequested,
    JobEnded,
    JobRetryScheduled,
    JobStarted,
    NodeInventoryObserved,
    ReservationReleased,
    ReservationStarted,
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

TFLOPS = 82.6


def _root_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    path.chmod(0o711)  # the job's account must reach its output dir
    return path


@dataclass
class World(AgentWorld):
    data_dir: Path = Path()


def new_backend(data_dir: Path, config: Config) -> LocalBackend:
    settings = LocalSettings(data_dir=data_dir, nodes=list(config.nodes), timeout_grace_s=1.0)
    return LocalBackend(settings)


@pytest_asyncio.fixture
async def world(bus: EventBus) -> AsyncIterator[World]:
    data_dir, out_root = _root_dir("jpu-agent-data-"), _root_dir("jpu-agent-out-")
    config = msgspec.structs.replace(
        load_config(), stream_name=bus.stream, subject_prefix=bus.prefix, data_dir=str(data_dir)
    )
    w = World(bus, config, new_backend(data_dir, config), out_root, data_dir=data_dir)
    try:
        yield w
    finally:
        await w.stop_agents()
        for bid in await w.backend.running():
            await w.backend.cancel(bid, 0.0)
        await asyncio.sleep(0.3)
        await w.backend.close()
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(out_root, ignore_errors=True)


async def test_X6_dispatched_job_starts_runs_and_ends_with_its_cost(world: World) -> None:
    job = "jrun"
    await world.append(
        *submitted(job, "sleep 1.2", num_gpus=2),
        event(ReservationStarted, job_id=job, node=NODE, tier=TIER, gpus=[0]),
        event(ReservationReleased, job_id=job, node=NODE, tier=TIER, gpus=[0], reason="demoted",
           gpu_seconds=5.0, charged_now=True, tflops=TFLOPS),  # R3: charged already
        event(ReservationStarted, job_id=job, node=NODE, tier=TIER, gpus=[0]),
        event(ReservationReleased, job_id=job, node=NODE, tier=TIER, gpus=[0, 1],
           reason="dispatched", gpu_seconds=10.0, charged_now=False, tflops=TFLOPS),
        dispatched(job, [0, 1]),
    )  # fmt: skip
    world.start_agent()
    events = await wait_events(world.bus, job, ended)
    (started,) = of(events, JobStarted)
    (end,) = of(events, JobEnded)
    assert started.attempt == 1 and started.isolation in ("uid+netns", "none")
    assert end.state == "COMPLETED" and end.exit_code == 0 and end.attempt == 1
    assert (end.node, end.tier, end.gpus) == (NODE, TIER, [0, 1])
    assert 2 * 1.2 <= end.gpu_seconds_run < 2 * 3.0  # num_gpus × run seconds
    assert end.gpu_seconds_reserved == 10.0  # F4: only the uncharged reservation part
    assert end.tflops == TFLOPS
    # F5: held from the dispatch: the launch before the backend's start is charged too
    assert 0.0 <= end.gpu_seconds_startup < 2 * 2.0
    held = end.gpu_seconds_startup + end.gpu_seconds_run + 10.0
    assert abs(end.usage - held * TFLOPS) < 1e-6  # F1, F2, F5
    assert end.backend_job_id == started.backend_job_id and not end.oom
    inventory = [d.event async for d in world.bus.replay(filter_subject=f"{world.bus.prefix}.>")]
    nodes = {e.node for e in inventory if isinstance(e, NodeInventoryObserved)}
    assert nodes == {n.name for n in world.config.nodes}


async def test_X7_gpu_oom_attempt_ends_failed_with_oom(world: World) -> None:
    job = "joom"
    cmd = 'echo "torch.OutOfMemoryError: CUDA out of memory." >&2\nexit 1\n'
    await world.append(*submitted(job, cmd), dispatched(job, [1]))
    world.start_agent()
    (end,) = of(await wait_events(world.bus, job, ended), JobEnded)
    assert end.state == "FAILED" and end.exit_code == 1
    assert end.oom and end.reason == "OOM" and not end.host_oom


async def test_time_limit_ends_attempt_failed_TIMEOUT(world: World) -> None:
    job = "jtime"
    await world.append(*submitted(job, "sleep 30", time_limit_s=1), dispatched(job, [0]))
    world.start_agent()
    (end,) = of(await wait_events(world.bus, job, ended, timeout=15), JobEnded)
    assert end.state == "FAILED" and end.reason == "TIMEOUT"
    assert end.gpu_seconds_run >= 1.0 and end.gpu_seconds_run < 5


async def test_X5_cancel_of_running_job_lets_it_checkpoint(world: World) -> None:
    job = "jcancel"
    cmd = (
        "trap 'echo ok > \"$JOB_OUTPUT_DIR/ckpt\"; exit 0' TERM\n"
        'touch "$JOB_OUTPUT_DIR/armed"\nsleep 60 & wait\n'
    )
    await world.append(*submitted(job, cmd), dispatched(job, [0]))
    world.start_agent()
    await wait_events(world.bus, job, lambda ev: bool(of(ev, JobStarted)))
    # JobStarted means the process exists, not that its shell has set the trap yet: a TERM
    # before that line ends the script as any program without a handler ends (X5's grace is
    # for jobs that handle it). Cancel once the job says its handler is armed.
    armed = world.out_root / job / "1" / "armed"
    deadline = time.monotonic() + 30
    while not armed.exists():
        assert time.monotonic() < deadline, "the job never armed its TERM handler"
        await asyncio.sleep(0.02)
    await world.append(event(JobCancelRequested, job_id=job, by="alice"))
    (end,) = of(await wait_events(world.bus, job, ended), JobEnded)
    assert end.state == "CANCELLED" and end.reason == "cancelled" and not end.kill_failed
    assert (world.out_root / job / "1" / "ckpt").read_text() == "ok\n"
    assert end.gpu_seconds_run > 0


async def test_X5_cancel_before_launch_ends_attempt_without_running_it(world: World) -> None:
    job = "jearly"
    await world.append(
        *submitted(job, "touch ran"), dispatched(job, [0]),
        event(JobCancelRequested, job_id=job, by="alice"),
    )  # fmt: skip
    world.start_agent()
    events = await wait_events(world.bus, job, ended)
    (end,) = of(events, JobEnded)
    assert of(events, JobStarted) == []
    assert end.state == "CANCELLED" and end.gpu_seconds_run == 0.0
    assert not (world.out_root / job / "1").exists()


async def test_launch_failure_ends_attempt_failed(world: World) -> None:
    job = "jnonode"
    await world.append(*submitted(job, "true"), dispatched(job, [0], node="gpu-unknown-01"))
    world.start_agent()
    (end,) = of(await wait_events(world.bus, job, ended), JobEnded)
    assert end.state == "FAILED" and end.gpu_seconds_run == 0.0
    assert end.reason is not None and end.reason.startswith("NODE_FAIL: launch failed")
    assert "gpu-unknown-01" in end.reason


async def test_O5_agent_killed_mid_job_is_restarted_and_readopts_it(
    world: World, nats_url: str
) -> None:
    job = "jadopt"
    await world.append(*submitted(job, "sleep 3\nexit 5\n"), dispatched(job, [1]))
    proc = await world.spawn_agent_process(nats_url)
    try:
        await wait_events(world.bus, job, lambda ev: bool(of(ev, JobStarted)), timeout=30)
    finally:
        proc.send_signal(signal.SIGKILL)  # a crash: no drain, no goodbye
        await proc.wait()
    world.start_agent()  # a new agent (and a new backend instance) on the same log and data
    events = await wait_events(world.bus, job, ended)
    assert len(of(events, JobStarted)) == 1  # re-adopted, never launched again
    (end,) = of(events, JobEnded)
    assert end.state == "FAILED" and end.exit_code == 5  # the real exit of the same process
    assert 3.0 <= end.gpu_seconds_run < 6


async def test_O5_launched_but_unrecorded_attempt_is_adopted_not_relaunched(world: World) -> None:
    job = "jwindow"
    cmd = 'echo run >> "$JOB_OUTPUT_DIR/runs"; sleep 0.5'
    await world.append(*submitted(job, cmd), dispatched(job, [0]))
    # An agent died between the backend submit and the JobStarted append:
    spec = LaunchSpec(
        job_id=job, attempt=1, user="alice", node=NODE, tier=TIER, gpus=[0], num_gpus=1,
        command=cmd, output_dir=str(world.out_root / job / "1"),
    )  # fmt: skip
    bid = await world.backend.submit(spec)
    world.start_agent()
    events = await wait_events(world.bus, job, ended)
    (started,) = of(events, JobStarted)
    assert started.backend_job_id == bid
    assert (world.out_root / job / "1" / "runs").read_text() == "run\n"


async def test_O5_backend_job_unknown_to_the_log_is_cancelled(world: World) -> None:
    spec = LaunchSpec(
        job_id="ghost", attempt=1, user="alice", node=NODE, tier=TIER, gpus=[1], num_gpus=1,
        command="sleep 60", output_dir=str(world.out_root / "ghost" / "1"),
    )  # fmt: skip
    bid = await world.backend.submit(spec)
    world.start_agent(cancel_grace_s=0.5)
    deadline = time.monotonic() + 10
    while not (status := await world.backend.poll(bid)).terminal:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    assert status.state == "CANCELLED"


async def folded_by(bus: EventBus, durables: list[str], job: str, timeout: float = 15.0) -> None:
    """Until every agent's durable consumer has acknowledged the job's last event and none came
    after: each agent's fold has the job's start and end, so none records them again (a positive
    signal, not a pause)."""
    subject = f"{bus.prefix}.job.{job}"
    deadline = time.monotonic() + timeout
    while True:
        last = await bus.last_subject_seq(subject)
        floors = [(await bus.js.consumer_info(bus.stream, d)).ack_floor for d in durables]
        done = all(f is not None and (f.stream_seq or 0) >= last for f in floors)
        if done and await bus.last_subject_seq(subject) == last:
            return
        assert time.monotonic() < deadline, (last, floors)
        await asyncio.sleep(0.05)


async def test_E2_two_agents_record_one_start_and_one_end(world: World) -> None:
    job = "jtwo"
    await world.append(*submitted(job, "sleep 1"), dispatched(job, [0]))
    world.start_agent(durable="agent-a")
    world.start_agent(durable="agent-b")
    await wait_events(world.bus, job, ended)
    await folded_by(world.bus, ["agent-a", "agent-b"], job)
    events = await world.bus.job_events(job)
    assert len(of(events, JobStarted)) == 1
    assert len(of(events, JobEnded)) == 1


async def test_X8_retried_attempt_runs_as_attempt_2_in_its_own_dir(world: World) -> None:
    job = "jretry"
    cmd = 'echo "attempt=$JOB_ATTEMPT dir=$JOB_OUTPUT_DIR"'
    await world.append(
        *submitted(job, cmd), dispatched(job, [0]),
        event(JobStarted, job_id=job, attempt=1, backend_job_id="elsewhere-1"),
        event(JobEnded, job_id=job, attempt=1, state="FAILED", exit_code=1, oom=True, reason="OOM"),
        event(JobRetryScheduled, job_id=job, attempt=2, min_vram_gb=25),
        dispatched(job, [1], attempt=2),
    )  # fmt: skip
    world.start_agent()
    events = await wait_events(world.bus, job, lambda ev: len(of(ev, JobEnded)) == 2)
    started = of(events, JobStarted)
    assert [s.attempt for s in started] == [1, 2]
    end = of(events, JobEnded)[-1]
    assert end.attempt == 2 and end.state == "COMPLETED" and end.gpus == [1]
    out = (world.out_root / job / "2" / "stdout").read_text()
    assert out == f"attempt=2 dir={world.out_root / job / '2'}\n"


async def test_X5_kill_failed_is_recorded_and_the_node_drained(world: World) -> None:
    await world.backend.close()
    world.backend = LocalBackend(
        LocalSettings(data_dir=world.data_dir, nodes=list(world.config.nodes),
                      kill_failed_after_s=0.0)
    )  # fmt: skip
    job = "jstuck"
    await world.append(*submitted(job, "trap '' TERM\nwhile true; do sleep 0.2; done\n"),
                       dispatched(job, [0]))  # fmt: skip
    world.start_agent(cancel_grace_s=0.5)
    await wait_events(world.bus, job, lambda ev: bool(of(ev, JobStarted)))
    await world.append(event(JobCancelRequested, job_id=job, by="admin"))
    (end,) = of(await wait_events(world.bus, job, ended), JobEnded)
    assert end.state == "CANCELLED" and end.kill_failed and end.reason == "kill_failed"
    subject = f"{world.bus.prefix}.inventory.{NODE}"
    deadline = time.monotonic() + 10
    while True:
        states = [d.event.state async for d in world.bus.replay(filter_subject=subject)]
        if states[-1:] == ["drain"]:
            break
        assert time.monotonic() < deadline, states
        await asyncio.sleep(0.2)


async def test_O5_agent_recovers_from_the_snapshot_and_the_tail(world: World) -> None:
    """SPEC O6: a restart folds the shared snapshot + the log's tail (not every job subject
    from seq 1), finds the same attempts a full replay finds, and runs them."""
    from jpu.bus.snapshots import SnapshotStore
    from jpu.domain.cluster import ClusterState, evolve
    from jpu_services.slurm_agent.recovery import fold_log

    await world.append(
        *submitted("jold", "true"), dispatched("jold", [0]),
        event(JobEnded, job_id="jold", attempt=1, state="COMPLETED", node=NODE, tier=TIER,
              gpus=[0], exit_code=0),
        *submitted("jsnap", "sleep 0.3"), dispatched("jsnap", [0]),
        *submitted("jqueued", "true"),  # in flight, but owes the agent nothing
    )  # fmt: skip
    state = ClusterState.new(world.config, keep_ended=False)  # what a service would snapshot
    async for d in world.bus.replay():
        evolve(state, d)
    header = await SnapshotStore(world.bus.js, world.bus.stream).save(state)
    await world.append(*submitted("jtail", "sleep 0.3"), dispatched("jtail", [1]))

    found = await fold_log(world.bus, world.config)
    assert found.restored_from == header.seq and found.last_seq == await world.bus.last_seq()
    assert set(found.jobs) == {"jsnap", "jtail"}
    full = await fold_log(world.bus, msgspec.structs.replace(world.config, snapshots=False))
    assert full.restored_from == 0 and full.last_seq == found.last_seq
    assert full.jobs == found.jobs

    world.start_agent()
    for job in ("jsnap", "jtail"):
        events = await wait_events(world.bus, job, ended)
        assert [e.state for e in of(events, JobEnded)] == ["COMPLETED"]
        assert len(of(events, JobStarted)) == 1
    assert len(of(await world.bus.job_events("jold"), JobStarted)) == 0  # ended: not run again


async def test_O5_agent_killed_mid_container_job_readopts_it_and_its_container_ends(
    world: World, nats_url: str
) -> None:
    """X4a + O5: the same crash with `isolation: container` (real podman)."""
    job = "jcontainer"
    await world.append(*submitted(job, "sleep 3\nexit 5\n"), dispatched(job, [1]))
    proc = await world.spawn_agent_process(nats_url, {"JPU_ISOLATION": "container"})
    try:
        events = await wait_events(world.bus, job, lambda ev: bool(of(ev, JobStarted)), timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)  # a crash while the container runs
        await proc.wait()
    assert of(events, JobStarted)[0].isolation == "container:podman"
    await world.backend.close()
    container = LocalSettings(
        data_dir=world.data_dir, nodes=list(world.config.nodes), timeout_grace_s=1.0,
        isolation="container",
    )  # fmt: skip
    world.backend = LocalBackend(container)
    world.start_agent()
    events = await wait_events(world.bus, job, ended, timeout=60)
    assert len(of(events, JobStarted)) == 1  # re-adopted, never launched again
    (end,) = of(events, JobEnded)
    assert end.state == "FAILED" and end.exit_code == 5  # the container's own exit
    name = f"jpu-local-{job}-1"  # the attempt's container (isolation.container_name)
    gone = await asyncio.create_subprocess_exec("podman", "container", "exists", name)
    assert await gone.wait() == 1  # --rm: nothing left of the attempt
