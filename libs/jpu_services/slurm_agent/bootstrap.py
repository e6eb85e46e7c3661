"""Composition root of the slurm-agent service: configuration → bus + database → workers."""

from __future__ import annotations

import asyncio

from jpu.backends import make_backend
from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges, connect_edges
from jpu.runtime.service import Worker
from jpu_services.slurm_agent.config import SlurmAgentConfig
from jpu_services.slurm_agent.options import AgentOptions
from jpu_services.slurm_agent.run import run_agent


async def bootstrap(config: SlurmAgentConfig, stop: asyncio.Event | None = None) -> Edges:
    """Connect the bus (ensuring the stream) and the pool (applying migrations)."""
    return await connect_edges(config.base, name="slurm-agent", stop=stop)


def workers(edges: Edges) -> dict[str, Worker]:
    """The agent (SPEC §5) over the configured backend (X9). Stopping the agent never stops the
    jobs: a restarted agent re-adopts them (run.py)."""
    backend = make_backend(edges.config)
    options = AgentOptions.from_config(edges.config)

    async def agent(stop: asyncio.Event) -> None:
        try:
            await run_agent(edges.bus, edges.config, backend, SystemClock(), stop, options)
        finally:
            await backend.close()

    return {"agent": agent}
