"""The agent removes ended jobs' output directories older than `outputs_keep_days`.

The decision is the domain's (jpu.domain.retention), taken on a fresh read of the job's own
events: the log, not the directory's times, says whether and when a job ended. Removal works
relative to a descriptor of the root-owned output root and never follows a symlink below it
(`shutil.rmtree(dir_fd=…)` walks with openat/O_NOFOLLOW), as the job's account owns everything
below `<root>/<job_id>/` (jpu.backends.outputs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import stat
from collections.abc import Awaitable, Callable, Container
from pathlib import Path

from jpu.domain.retention import EndedJob, output_expired
from jpu.runtime.clock import Clock
from jpu.runtime.metrics import count_outputs_pruned

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 3600.0
_JOB_DIR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")  # a job or array task id (SPEC U8)

ReadJob = Callable[[str], Awaitable[EndedJob | None]]


async def prune_outputs(
    root: Path, read: ReadJob, now: float, keep_days: float, live: Container[str] = ()
) -> list[str]:
    """Remove `<root>/<job_id>` of each job the log says ended `keep_days` ago; return their ids.
    `live`: jobs the agent is running or owes an action (skipped without a read)."""
    if keep_days <= 0:
        return []
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return []
    removed: list[str] = []
    try:
        for name in sorted(os.listdir(fd)):
            if not _JOB_DIR.match(name) or name in live or not _is_dir(fd, name):
                continue
            if not output_expired(await read(name), now, keep_days):
                continue
            with contextlib.suppress(FileNotFoundError):  # another agent removed it first
                await asyncio.to_thread(shutil.rmtree, name, dir_fd=fd)
            removed.append(name)
            count_outputs_pruned()
            log.info("removed the outputs of job %s (ended over %g days ago)", name, keep_days)
    finally:
        os.close(fd)
    return removed


def _is_dir(fd: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


async def prune_loop(
    root: Path,
    read: ReadJob,
    clock: Clock,
    keep_days: float,
    live: Container[str],
    stop: asyncio.Event,
    every_s: float = PRUNE_EVERY_S,
) -> None:
    """Prune at start and then every `every_s` until `stop`; a failed round is retried next."""
    while not stop.is_set():
        try:
            await prune_outputs(root, read, clock.now(), keep_days, live)
        except Exception:  # a full disk or a lost bus: the next round tries again
            log.exception("pruning outputs under %s failed", root)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), every_s)
