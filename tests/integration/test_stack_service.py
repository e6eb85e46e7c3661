"""Process plumbing of every service (jpu.runtime.service): workers, drain, heartbeat, JSON logs."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import asyncpg
import pytest

from jpu.bus import EventBus
from jpu.config import load_config
from jpu.runtime.clock import FakeClock
from jpu.runtime.edges import Edges
from jpu.runtime.service import JsonFormatter, run_workers
from jpu.stack.prepare import publish_missing_inventory


async def test_O5_worker_failure_crashes_the_service() -> None:
    async def broken(stop: asyncio.Event) -> None:
        raise ValueError("projection bug")

    async def idle(stop: asyncio.Event) -> None:
        await stop.wait()

    stop = asyncio.Event()
    with pytest.raises(ValueError, match="projection bug"):
        await run_workers(stop, {"broken": broken, "idle": idle})


async def test_O5_worker_failing_after_setting_stop_crashes_the_service() -> None:
    """A worker that sets `stop` on its way out and then raises (the slurm-agent's loops do)
    must not turn into a clean exit 0 with no reason logged."""

    async def stops_then_fails(stop: asyncio.Event) -> None:
        try:
            raise ValueError("consumer ended")
        finally:
            stop.set()
            await asyncio.sleep(0.01)  # its own cleanup

    async def idle(stop: asyncio.Event) -> None:
        await stop.wait()

    stop = asyncio.Event()
    with pytest.raises(ValueError, match="consumer ended"):
        await run_workers(stop, {"agent": stops_then_fails, "idle": idle})


async def test_stop_drains_workers_and_heartbeat_file_tracks_liveness(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    beat = tmp_path / "run" / "heartbeat"
    monkeypatch.setenv("JPU_HEARTBEAT_FILE", str(beat))
    drained = []

    async def worker(stop: asyncio.Event) -> None:
        await stop.wait()
        await asyncio.sleep(0.05)  # finishing its batch
        drained.append(True)

    stop = asyncio.Event()
    task = asyncio.create_task(run_workers(stop, {"w": worker}))
    for _ in range(50):
        if beat.exists():
            break
        await asyncio.sleep(0.02)
    assert beat.exists()  # what the container probes check
    stop.set()
    await asyncio.wait_for(task, 5)
    assert drained == [True]
    assert not beat.exists()


def test_logs_are_json_lines_with_extra_fields() -> None:
    record = logging.makeLogRecord(
        {"name": "jpu.x", "levelname": "WARNING", "msg": "retry %s", "args": (3,), "node": "n1"}
    )
    line = json.loads(JsonFormatter("intake").format(record))
    assert line["service"] == "intake" and line["level"] == "warning"
    assert line["msg"] == "retry 3" and line["node"] == "n1" and line["logger"] == "jpu.x"


async def test_configured_inventory_is_published_once(bus: EventBus, pool: asyncpg.Pool) -> None:
    config = load_config(env={"JPU_STREAM_NAME": bus.stream, "JPU_SUBJECT_PREFIX": bus.prefix})
    edges = Edges(config, bus, pool)
    clock = FakeClock(1000.0)
    first = await publish_missing_inventory(edges, clock)
    assert first == [n.name for n in config.nodes]
    assert await publish_missing_inventory(edges, clock) == []  # a restart publishes nothing
    assert await bus.last_seq() == len(config.nodes)
