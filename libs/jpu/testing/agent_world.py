"""The slurm-agent fed hand-written events, for the tests of both backends (SPEC §5, X6, O5).

`AgentWorld` runs agents in-process on a real EventBus and a real backend (local processes or
the Slurm test cluster); `spawn_agent_process` starts one as a separate process that a test can
SIGKILL mid-job (`python -m jpu.testing.agent_world OUTPUT_ROOT`, configured through JPU_* env).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jpu.backends import ExecutionBackend, make_backend
from jpu.bus import Delivered, EventBus
from jpu.config import Config, load_config
from jpu.events import Event, JobDispatched, JobEnded, JobPromoted, JobSubmitted, new_event_id
from jpu.runtime.clock import SystemClock
from jpu_services.slurm_agent.options import AgentOptions
from jpu_services.slurm_agent.run import run_agent

NODE, TIER = "gpu-4090x2-01", "rtx4090"


@dataclass
class AgentWorld:
    bus: EventBus
    config: Config
    backend: ExecutionBackend
    out_root: Path
    agents: list[tuple[asyncio.Event, asyncio.Task[None]]] = field(default_factory=list)

    def options(self, **kw: Any) -> AgentOptions:
        base: dict[str, Any] = {
            "cancel_grace_s": 2.0, "poll_min_s": 0.1, "poll_max_s": 0.5,
            "output_root": self.out_root,
        }  # fmt: skip
        return AgentOptions(**{**base, **kw})

    def start_agent(self, **kw: Any) -> None:
        stop = asyncio.Event()
        run = run_agent(
            self.bus, self.config, self.backend, SystemClock(), stop, self.options(**kw)
        )
        self.agents.append((stop, asyncio.create_task(run)))

    async def stop_agents(self) -> None:
        for stop, task in self.agents:
            stop.set()
            await asyncio.wait_for(task, 15)
        self.agents.clear()

    async def append(self, *events: Event) -> None:
        for e in events:
            await self.bus.append(e)

    async def spawn_agent_process(
        self, nats_url: str, env: Mapping[str, str] | None = None
    ) -> asyncio.subprocess.Process:
        """An agent of its own (own backend instance) on the same log, data dir and cluster."""
        nodes = [{"name": n.name, "gpus": dict(n.gpus)} for n in self.config.nodes]
        full_env = {
            **os.environ,
            "JPU_NATS_URL": nats_url,
            "JPU_STREAM_NAME": self.bus.stream,
            "JPU_SUBJECT_PREFIX": self.bus.prefix,
            "JPU_DATA_DIR": self.config.data_dir,
            "JPU_NODES": json.dumps(nodes),  # JSON is YAML: read like any JPU_* override
            "JPU_SLURM_BACKEND": self.config.slurm_backend,
            **(env or {}),
        }
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jpu.testing.agent_world", str(self.out_root), env=full_env
        )


def event(cls: type[Event], **kw: Any) -> Event:
    return cls(event_id=new_event_id(), ts=time.time(), **kw)


def submitted(job_id: str, command: str, num_gpus: int = 1, **kw: Any) -> list[Event]:
    return [
        event(JobSubmitted, job_id=job_id, lab="BCG", user="alice", name=job_id, command=command,
              num_gpus=num_gpus, **kw),
        event(JobPromoted, job_id=job_id, queue_entered_at=time.time()),
    ]  # fmt: skip


def dispatched(
    job_id: str, gpus: list[int], attempt: int = 1, node: str = NODE, tier: str = TIER
) -> Event:
    return event(JobDispatched, job_id=job_id, attempt=attempt, node=node, tier=tier, gpus=gpus)


async def wait_events(
    bus: EventBus, job_id: str, done: Callable[[list[Delivered]], bool], timeout: float = 30.0
) -> list[Delivered]:
    deadline = time.monotonic() + timeout
    while True:
        events = await bus.job_events(job_id)
        if done(events):
            return events
        assert time.monotonic() < deadline, [type(d.event).__name__ for d in events]
        await asyncio.sleep(0.2)


def of(events: list[Delivered], cls: type[Event]) -> list[Any]:
    return [d.event for d in events if isinstance(d.event, cls)]


def ended(events: list[Delivered]) -> bool:
    return bool(of(events, JobEnded))


async def _agent_process(output_root: Path) -> None:
    config = load_config()
    bus = await EventBus.connect(
        config.nats_url, stream=config.stream_name, prefix=config.subject_prefix
    )
    options = AgentOptions(poll_min_s=0.1, poll_max_s=0.5, output_root=output_root)
    await run_agent(bus, config, make_backend(config), SystemClock(), asyncio.Event(), options)


if __name__ == "__main__":
    asyncio.run(_agent_process(Path(sys.argv[1])))
