"""Waiting on a backend job in tests of either backend (SPEC X9 contract)."""

from __future__ import annotations

import asyncio
import time

from jpu.backends import BackendStatus, ExecutionBackend


async def wait_end(
    backend: ExecutionBackend, bid: str, timeout: float = 20.0, every_s: float = 0.05
) -> BackendStatus:
    """Poll until the backend job is terminal; fail naming it after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = await backend.poll(bid)
        if status.terminal:
            return status
        await asyncio.sleep(every_s)
    raise AssertionError(f"{bid} did not end within {timeout}s")
