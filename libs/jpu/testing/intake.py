"""Helpers of the tests that drive intake over NATS request/reply (SPEC Q1–Q9)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec

from jpu.bus import EventBus
from jpu.commands import CommandReply, SubmitCommand, decode_reply, encode, submit_subject
from jpu.config import Config, LabConfig, UserConfig, load_config

BODY = {"name": "train", "command": "python train.py", "num_gpus": 1}


def config_with_limits() -> Config:
    """Alice of BCG with 3 slots (S1), a fast cycle."""
    return msgspec.structs.replace(
        load_config(env={}),
        labs=[LabConfig(name="BCG", users=[UserConfig(name="alice", max_active_jobs=3)])],
        cycle_s=0.5,
        min_cycle_gap_s=0.02,
    )


@asynccontextmanager
async def running(fn: Any, *args: Any, **kw: Any) -> AsyncIterator[asyncio.Task]:
    """`fn(*args, stop, **kw)` as a task, stopped (and awaited) at the end."""
    stop = asyncio.Event()
    task = asyncio.create_task(fn(*args, stop, **kw))
    try:
        yield task
    finally:
        stop.set()
        await asyncio.wait_for(task, 15)


async def submit(
    bus: EventBus, body: dict, user: str = "alice", lab: str = "BCG", key: str | None = None
) -> CommandReply:
    cmd = SubmitCommand(user=user, lab=lab, body=body, idempotency_key=key)
    msg = await bus.nc.request(submit_subject(bus.prefix), encode(cmd), timeout=10)
    return decode_reply(msg.data)


async def wait_subscribed(bus: EventBus) -> None:
    """Intake answers once it has caught up and subscribed."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            await bus.nc.request(submit_subject(bus.prefix), b"{}", timeout=0.5)
            return
        except Exception:
            await asyncio.sleep(0.05)
    raise TimeoutError("intake did not answer")
