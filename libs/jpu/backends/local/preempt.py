"""SPEC B2 on the local backend: end the backfill instances on GPUs a research job is about to
use, from any process (the slurm-agent calls it; the instances belong to the backfill service).

The records on disk say which instances hold which GPUs; the pid and its start time identify
the process. SIGTERM at once, SIGKILL after the grace, and the call returns once they are gone,
so the research job never shares its GPUs (B4: the preemption is its only delay).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time

from jpu.backends import process as proc_
from jpu.backends.local.records import RecordStore

log = logging.getLogger(__name__)
_PREEMPT_POLL_S = 0.01
_KILL_WAIT_S = 2.0


async def preempt(
    store: RecordStore, node: str, tier: str, gpus: list[int], grace_s: float
) -> list[str]:
    """B2 from any process: the records on disk say which instances hold these GPUs."""
    victims = [
        r
        for r in store.all()
        if r.final is None
        and r.node == node
        and r.tier == tier
        and set(r.gpus) & set(gpus)
        and r.pid
        and proc_.is_alive(r.pid, r.ticks)
    ]
    for r in victims:
        proc_.signal_group(r.pid, signal.SIGTERM)
    deadline, killed = time.monotonic() + grace_s, False
    while any(proc_.is_alive(r.pid, r.ticks) for r in victims):
        if time.monotonic() >= deadline:
            if killed:
                log.error("backfill on %s/%s%s survived SIGKILL", node, tier, gpus)
                break
            for r in victims:
                proc_.signal_group(r.pid, signal.SIGKILL)
            deadline, killed = time.monotonic() + _KILL_WAIT_S, True
        await asyncio.sleep(_PREEMPT_POLL_S)
    if victims:
        log.info(
            "preempted backfill %s on %s/%s%s",
            [r.backend_job_id for r in victims],
            node,
            tier,
            gpus,
        )
    return [r.backend_job_id for r in victims]
