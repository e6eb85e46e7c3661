"""The whole JPU-Share stack in-process on the real Slurm test cluster, for the stack tests
(SPEC §5–§7): real NATS JetStream and PostgreSQL, the gateway app over ASGI, intake, dispatcher,
accounting, the slurm-agent and the backfill service, both on `slurm_backend: slurm`
(make_backend, as `python -m jpu.stack run` builds them). Periods are short (1 s cycle and settle).

Import into a test module: `from jpu.testing.slurm_stack import SlurmStack, slurm_stack`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import msgspec

from jpu.backends import joblogs, make_backend
from jpu.backends.slurm.backend import SlurmBackend
from jpu.bus import EventBus
from jpu.config import Config, load_config
from jpu.domain.cluster import ClusterState
from jpu.events import Event, NodeInventoryObserved
from jpu.runtime.edges import Edges
from jpu.testing.api import bearer
from jpu.testing.fold import Watcher
from jpu.testing.inprocess import Worker, inprocess_stack, service_workers
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.slurm_env import root_dir
from jpu.testing.slurm_fixtures import SlurmCluster
from jpu_services.backfill.service import BackfillOptions, BackfillStats
from jpu_services.dispatcher.service import DispatcherStats
from jpu_services.slurm_agent.options import AgentOptions

NODES = (
    "[{name: gpu-4090x2-01, gpus: {rtx4090: 2}}, {name: gpu-4090x2-02, gpus: {rtx4090: 2}},"
    " {name: gpu-3080tix2-01, gpus: {rtx3080ti: 2}}]"
)
N4090 = [(n, "rtx4090", g) for n in ("gpu-4090x2-01", "gpu-4090x2-02") for g in (0, 1)]
# Slurm job states that still hold resources (squeue also lists recently ended jobs).
SKIP = {"event_id", "ts", "schema_version", "command", "env", "idempotency_key"}  # timeline
ACTIVE_SLURM = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED"}


CAROL = bearer("kdg-carol")


def stack_config(
    nats_url: str, pg_dsn: str, data_dir: Path, extra: dict[str, str] | None = None
) -> Config:
    stream, prefix = unique_names()
    return load_config(
        env={
            "JPU_NATS_URL": nats_url, "JPU_DATABASE_URL": pg_dsn, "JPU_STREAM_NAME": stream,
            "JPU_SUBJECT_PREFIX": prefix, "JPU_DATA_DIR": str(data_dir), "JPU_NODES": NODES,
            "JPU_SLURM_BACKEND": "slurm", "JPU_CYCLE_S": "1", "JPU_MIN_CYCLE_GAP_S": "0.05",
            "JPU_BACKFILL_SETTLE_S": "1", "JPU_CANCEL_GRACE_S": "2",
            "JPU_SUBMIT_RATE_PER_S": "0", **(extra or {}),
        }
    )  # fmt: skip


def stack_workers(
    config: Config,
    cluster: SlurmCluster,
    out: Path,
    stats: BackfillStats,
    dispatcher_stats: DispatcherStats,
) -> Callable[[Edges], Any]:
    options = AgentOptions(
        cancel_grace_s=2.0, poll_min_s=0.05, poll_max_s=0.3, inventory_every_s=5.0,
        output_root=out, backfill_grace_s=2.0,
    )  # fmt: skip
    bf_options = BackfillOptions(
        command=config.backfill_command, settle_s=config.backfill_settle_s, grace_s=2.0, poll_s=0.2
    )

    def workers(edges: Edges) -> dict[str, Worker]:
        env = {"JPU_SLURM_CONF": cluster.conf}
        agent_backend, bf_backend = make_backend(config, env), make_backend(config, env)
        assert isinstance(agent_backend, SlurmBackend) and isinstance(bf_backend, SlurmBackend)
        return service_workers(
            edges, config, agent_backend, bf_backend, options, bf_options, stats, dispatcher_stats
        )

    return workers


async def leave_nothing(config: Config, cluster: SlurmCluster) -> None:
    """Instances and jobs outlive their services by design; a test must not."""
    backend = make_backend(config, {"JPU_SLURM_CONF": cluster.conf})
    assert isinstance(backend, SlurmBackend)
    for bid in await backend.running_backfill():
        await backend.cancel_backfill(bid, 0.0)
    deadline = time.monotonic() + 20
    while await backend.running_backfill() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    await backend.close()


def squeue(cluster: SlurmCluster) -> list[dict[str, Any]]:
    """Slurm's own view (`squeue --json`), bypassing the platform."""
    done = subprocess.run(
        ["squeue", "--json"], env={**os.environ, "SLURM_CONF": cluster.conf},
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    body = json.loads(done.stdout)
    assert not body.get("errors"), body["errors"]  # squeue exits 0 even if slurmctld is down
    return list(body["jobs"])


def active_slurm_jobs(cluster: SlurmCluster, partition: str) -> dict[str, str]:
    """Slurm job id -> state of the partition's jobs that still hold resources."""
    jobs = squeue(cluster)
    return {
        str(j["job_id"]): str(j["job_state"])
        for j in jobs
        if j["partition"] == partition and j["job_state"] in ACTIVE_SLURM
    }


@dataclass
class SlurmStack:
    config: Config
    cluster: SlurmCluster
    data_dir: Path
    client: httpx.AsyncClient  # the gateway
    watcher: Watcher  # the log as a fold, what the test observes
    bus: EventBus  # the test's own connection
    backfill_stats: BackfillStats
    dispatcher_stats: DispatcherStats

    @property
    def state(self) -> ClusterState:
        return self.watcher.state

    async def until(self, pred: Callable[[ClusterState], Any], timeout: float = 30.0) -> Any:
        try:
            return await self.watcher.until(pred, timeout)
        except TimeoutError as e:  # say what happened instead: the log and Slurm's queue
            raise TimeoutError(f"{e}; the log:\n{await self.timeline()}") from e

    async def timeline(self) -> str:
        """The log (inventory left out) and Slurm's jobs, one line each, for failure messages."""
        lines = []
        for e in await self.events():
            if not isinstance(e, NodeInventoryObserved):
                fields = {k: v for k, v in msgspec.structs.asdict(e).items() if k not in SKIP}
                lines.append(f"{e.ts:.2f} {type(e).__name__} {fields}")
        jobs = [
            (j["job_id"], j["partition"], j["job_state"], j["nodes"]) for j in squeue(self.cluster)
        ]
        return "\n".join([*lines, f"squeue: {jobs}"])

    async def submit(self, user: str, body: dict[str, Any]) -> str:
        r = await self.client.post("/v1/jobs", json={"name": "t", **body}, headers=bearer(user))
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def events(self, *types: type[Event]) -> list[Any]:
        await self.watcher.synced()
        return [d.event async for d in self.bus.replay() if not types or isinstance(d.event, types)]

    async def events_until(self, pred: Callable[[list[Any]], bool], timeout: float) -> list[Any]:
        deadline = time.monotonic() + timeout
        while True:
            events = await self.events()
            if pred(events) or time.monotonic() > deadline:
                return events
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def slurm_stack(
    nats_url: str,
    pool: asyncpg.Pool,
    pg_dsn: str,
    cluster: SlurmCluster,
    extra: dict[str, str] | None = None,
) -> AsyncIterator[SlurmStack]:
    """The whole stack in-process with a gateway client; everything torn down after. `extra`:
    more configuration (JPU_* variables)."""
    data_dir = root_dir("jpu-slurm-stack-")
    config = stack_config(nats_url, pg_dsn, data_dir, extra)
    stats, dispatcher_stats = BackfillStats(), DispatcherStats()
    workers = stack_workers(config, cluster, joblogs.output_root(config), stats, dispatcher_stats)
    try:
        async with inprocess_stack(
            config, pool, workers, lambda: leave_nothing(config, cluster)
        ) as (c, w, bus):
            yield SlurmStack(config, cluster, data_dir, c, w, bus, stats, dispatcher_stats)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
