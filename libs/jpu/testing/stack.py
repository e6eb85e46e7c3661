"""A whole JPU-Share stack in-process for the backfill and maintenance tests (SPEC §6, §7).

Real NATS JetStream and PostgreSQL, the real gateway app (over ASGI, with its projections), the
real intake, dispatcher, slurm-agent on the local backend (research jobs are local processes),
accounting, and the backfill service running `python -m jpu.tools.backfill_stub` on idle GPUs. Every
service runs with the system clock, as in production; only the periods are short.

`logs_stack` is one for the job-logs tests (two tiers, an OOM on the smaller one retried on the
bigger one).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from jpu.backends import joblogs
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.backends.local.stop import terminate_all
from jpu.bus import EventBus
from jpu.config import Config, load_config
from jpu.domain.cluster import ClusterState
from jpu.events import BackfillEnded, BackfillStarted, Event, MaintenanceChanged
from jpu.runtime.clock import SystemClock
from jpu.runtime.edges import Edges
from jpu.testing.api import bearer
from jpu.testing.fold import Watcher
from jpu.testing.inprocess import Worker, inprocess_stack, service_workers
from jpu.testing.nats_fixtures import unique_names
from jpu_services.backfill.service import BackfillOptions, BackfillStats, run_backfill
from jpu_services.slurm_agent.options import AgentOptions

NODE, TIER = "gpu-4090x2-01", "rtx4090"
ONE_NODE = f"[{{name: {NODE}, gpus: {{{TIER}: 2}}}}]"


async def backfill_rounds(
    stats: BackfillStats, watcher: Watcher, n: int = 2, after_s: float = 0.0
) -> None:
    """Until the backfill service has begun `n` more rounds (so one whole round ran on the log as
    it is now), after letting `after_s` pass first: a settle period, the earliest a new start
    could be planned. What proves "nothing more started", not a pause."""
    await asyncio.sleep(after_s)
    target = stats.rounds + n
    await watcher.until(lambda _: stats.rounds >= target, timeout=30.0)


@dataclass
class Stack:
    config: Config
    bus: EventBus  # the test's own connection
    pool: asyncpg.Pool
    client: httpx.AsyncClient  # the gateway
    watcher: Watcher  # the log as a fold, what the test observes
    data_dir: Path
    backfill_stats: BackfillStats

    @property
    def state(self) -> ClusterState:
        return self.watcher.state

    async def until(self, pred: Callable[[ClusterState], Any], timeout: float = 30.0) -> Any:
        return await self.watcher.until(pred, timeout)

    async def submit(self, user: str, command: str, num_gpus: int = 1, **kw: Any) -> str:
        body = {"name": "t", "command": command, "num_gpus": num_gpus, **kw}
        r = await self.client.post("/v1/jobs", json=body, headers=bearer(user))
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    async def backfill_rounds(self, n: int = 2, after_s: float = 0.0) -> None:
        await backfill_rounds(self.backfill_stats, self.watcher, n, after_s)

    async def maintenance(self, action: str, message: str = "") -> httpx.Response:
        body = {"action": action, "message": message}
        return await self.client.post("/v1/admin/maintenance", json=body, headers=bearer("admin"))

    async def events(self, *types: type[Event]) -> list[Any]:
        await self.watcher.synced()
        return [d.event async for d in self.bus.replay() if isinstance(d.event, types)]

    async def backfill_events(self) -> list[BackfillStarted | BackfillEnded]:
        return await self.events(BackfillStarted, BackfillEnded)

    async def maintenance_states(self) -> list[str]:
        return [e.state for e in await self.events(MaintenanceChanged)]

    def gpu_state(self, gpu: int, node: str = NODE, tier: str = TIER) -> str:
        key = (node, tier, gpu)
        held = self.state.holders.get(key)
        bf = self.state.backfill.get(key)
        return held or (f"backfill:{bf}" if bf else "free")


def _config(nats_url: str, pg_dsn: str, data_dir: Path, **over: str) -> Config:
    stream, prefix = unique_names()
    env = {
        "JPU_NATS_URL": nats_url,
        "JPU_DATABASE_URL": pg_dsn,
        "JPU_STREAM_NAME": stream,
        "JPU_SUBJECT_PREFIX": prefix,
        "JPU_DATA_DIR": str(data_dir),
        "JPU_NODES": ONE_NODE,
        "JPU_CYCLE_S": "1",
        "JPU_MIN_CYCLE_GAP_S": "0.05",
        "JPU_BACKFILL_SETTLE_S": "1",
        "JPU_CANCEL_GRACE_S": "2",
        "JPU_KILL_FAILED_AFTER_S": "5",
        "JPU_SUBMIT_RATE_PER_S": "0",
        **{f"JPU_{k.upper()}": v for k, v in over.items()},
    }
    return load_config(env=env)


@contextlib.asynccontextmanager
async def start_stack(
    nats_url: str, pool: asyncpg.Pool, pg_dsn: str, *, http: bool = False, **over: str
) -> AsyncIterator[Stack]:
    """`http`: the gateway under uvicorn (real HTTP: streamed answers, other processes)."""
    data_dir = Path(tempfile.mkdtemp(prefix="jpu-bf-", dir="/tmp"))
    data_dir.chmod(0o711)  # the job accounts must reach their output directories
    config = _config(nats_url, pg_dsn, data_dir, **over)
    settings = LocalSettings(data_dir=data_dir, nodes=list(config.nodes), timeout_grace_s=1.0)
    options = AgentOptions(
        cancel_grace_s=config.cancel_grace_s, poll_min_s=0.05, poll_max_s=0.3,
        inventory_every_s=5.0, output_root=joblogs.output_root(config), backfill_grace_s=2.0,
    )  # fmt: skip
    bf_options = BackfillOptions(
        enabled=config.backfill_enabled, command=config.backfill_command,
        settle_s=config.backfill_settle_s, grace_s=2.0, poll_s=0.1,
    )  # fmt: skip
    stats = BackfillStats()

    def workers(edges: Edges) -> dict[str, Worker]:
        backends = LocalBackend(settings), LocalBackend(settings)
        return service_workers(edges, config, *backends, options, bf_options, stats)

    try:
        async with inprocess_stack(
            config, pool, workers, lambda: _kill_leftovers(data_dir, config), http=http
        ) as (c, w, bus):
            yield Stack(config, bus, pool, c, w, data_dir, stats)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


async def _kill_leftovers(data_dir: Path, config: Config) -> None:
    """Jobs and backfill instances outlive their services by design; a test must not."""
    await asyncio.to_thread(terminate_all, data_dir, 2.0)


@contextlib.asynccontextmanager
async def another_backfill(s: Stack) -> AsyncIterator[BackfillStats]:
    """A second backfill service (a replica, or the restarted one) on the same cluster."""
    backend = LocalBackend(LocalSettings(data_dir=s.data_dir, nodes=list(s.config.nodes)))
    options = BackfillOptions(
        command=s.config.backfill_command, settle_s=s.config.backfill_settle_s, poll_s=0.1
    )
    stop, stats = asyncio.Event(), BackfillStats()
    task = asyncio.create_task(
        run_backfill(s.bus, s.config, backend, SystemClock(), stop, options, stats)
    )
    try:
        yield stats
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await backend.close()


# Two tiers where the smaller one is tried first (T1: sort_order DESC), so an OOM on it is
# retried on the bigger one (X8) without having to keep the bigger one busy.
TIERS = (
    "[{name: small, model: S, vram_gb: 12, tflops: 10, sort_order: 20, max_gpus: 2, "
    "partition: small}, {name: big, model: B, vram_gb: 24, tflops: 20, sort_order: 10, "
    "max_gpus: 2, partition: big}]"
)
NODES = "[{name: n-small, gpus: {small: 2}}, {name: n-big, gpus: {big: 2}}]"
OOM_ON_ATTEMPT_1 = """echo "attempt $JOB_ATTEMPT out"
echo "attempt $JOB_ATTEMPT err" >&2
if [ "$JOB_ATTEMPT" = 1 ]; then
  echo "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2
  exit 1
fi
"""


@contextlib.asynccontextmanager
async def logs_stack(nats_url: str, pool: asyncpg.Pool, pg_dsn: str) -> AsyncIterator[Stack]:
    async with start_stack(
        nats_url, pool, pg_dsn, http=True, tiers=TIERS, nodes=NODES, backfill_enabled="false"
    ) as s:
        yield s


async def wait_job(s: Stack, user: str, job_id: str, done: Any, timeout: float = 30) -> dict:
    """GET /v1/jobs/{id} until `done(job)`."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        job = (await s.client.get(f"/v1/jobs/{job_id}", headers=bearer(user))).json()
        if done(job):
            return dict(job)
        assert asyncio.get_running_loop().time() < deadline, job
        await asyncio.sleep(0.1)


def ended(job: dict) -> bool:
    return bool(job["terminal"])


# the files API tests (SPEC §8): a file of several read chunks
NUMBERS = "".join(f"{i}\n" for i in range(1, 20001)).encode()  # 108,894 bytes: several chunks
