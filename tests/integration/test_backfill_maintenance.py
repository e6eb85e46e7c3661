"""The backfill service when maintenance moves on in the middle of a round (SPEC M2, M3).

Found on real Slurm (tests/slurm/test_slurm_maintenance.py): a round launches its instances one
after another, and on Slurm each launch (sbatch, then waiting for the endpoint) takes about a
second; the dispatcher's BACKFILL_RECOVERY step lands on another subject, so no E2 conflict stops
the round. Here the real service runs on real NATS and the local backend, and the first launch of
a round is made slow in the same way: while it runs, maintenance goes DRAINING → BACKFILL_RECOVERY.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jpu.backends.backfill_contract import BackfillHandle, BackfillSpec
from jpu.backends.local.backend import LocalBackend, LocalSettings
from jpu.backends.local.stop import terminate_all
from jpu.bus import EventBus
from jpu.config import load_config
from jpu.events import BackfillEnded, BackfillStarted, MaintenanceChanged, new_event_id
from jpu.runtime.clock import SystemClock
from jpu.testing.nats_fixtures import unique_names
from jpu_services.backfill.service import BackfillOptions, BackfillService

NODES = "[{name: gpu-4090x2-01, gpus: {rtx4090: 2}}]"


class SlowFirstLaunch:
    """The real local backend, whose first launch waits for `meanwhile` (Slurm's slow sbatch)."""

    def __init__(self, inner: LocalBackend, meanwhile: Callable[[], Awaitable[None]]) -> None:
        self.inner, self.meanwhile = inner, meanwhile
        self.launched: list[int] = []  # GPU of each launch

    async def submit_backfill(self, spec: BackfillSpec) -> BackfillHandle:
        self.launched.append(spec.gpu)
        if len(self.launched) == 1:
            await self.meanwhile()
        return await self.inner.submit_backfill(spec)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_M2_no_launch_once_recovery_began_mid_round_and_the_launched_one_is_reclaimed(
    nats_url: str,
) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="jpu-bfm-", dir="/tmp"))
    stream, prefix = unique_names()
    env = {"JPU_NATS_URL": nats_url, "JPU_STREAM_NAME": stream, "JPU_SUBJECT_PREFIX": prefix,
           "JPU_DATA_DIR": str(data_dir), "JPU_NODES": NODES}  # fmt: skip
    config = load_config(env=env)
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix)
    await bus.ensure_stream()
    stop = asyncio.Event()

    async def maintenance_moves_on() -> None:  # as admin, then dispatcher (no user job runs)
        for state, by in (("DRAINING", "admin"), ("BACKFILL_RECOVERY", "dispatcher")):
            event = MaintenanceChanged(
                event_id=new_event_id(), ts=time.time(), state=state, by=by, message="m"
            )  # type: ignore[arg-type]
            await bus.append(event)
        while service.state.maintenance.state != "BACKFILL_RECOVERY":
            await asyncio.sleep(0.01)

    local = LocalBackend(LocalSettings(data_dir=data_dir, nodes=list(config.nodes)))
    backend = SlowFirstLaunch(local, maintenance_moves_on)
    options = BackfillOptions(command=config.backfill_command, settle_s=0.2, grace_s=1, poll_s=0.1)
    service = BackfillService(bus, config, backend, SystemClock(), options)  # type: ignore[arg-type]
    task = asyncio.create_task(service.run(stop))
    try:
        deadline = time.monotonic() + 20
        while not [e async for e in bus.replay() if isinstance(e.event, BackfillEnded)]:
            assert time.monotonic() < deadline, "the launched instance was never reclaimed"
            await asyncio.sleep(0.1)
        target = service.stats.rounds + 2  # later rounds (one whole): still nothing new
        while service.stats.rounds < target:
            assert time.monotonic() < deadline, "the service ran no later round"
            await asyncio.sleep(0.05)
        events = [d.event async for d in bus.replay()]
        starts = [e for e in events if isinstance(e, BackfillStarted)]
        ends = [e for e in events if isinstance(e, BackfillEnded)]
        assert len(backend.launched) == 1, backend.launched  # M2: the round stopped launching
        # the instance launched while DRAINING exists, so it is recorded, then reclaimed (M3
        # is decided on the log: ACTIVE cannot come while it runs)
        assert [e.gpu for e in starts] == backend.launched
        assert [(e.backfill_id, e.reason) for e in ends] == [(starts[0].backfill_id, "reclaimed")]
        assert await local.running_backfill() == []
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)
        await asyncio.to_thread(terminate_all, data_dir, 2.0)
        await local.close()
        await bus.delete_stream()
        await bus.close()
        shutil.rmtree(data_dir, ignore_errors=True)
