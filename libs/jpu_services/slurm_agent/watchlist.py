"""Which backend jobs the agent polls, and when: per-job backoff, no busy loop.

A job is polled `poll_min_s` after it starts (or is cancelled), then each unchanged poll waits
1.5× longer up to `poll_max_s`. The watch loop sleeps until the earliest due poll or a wake-up
(a newly tracked or cancelled job).

Rounds, not one poll per job: a due time is put on a grid of the monotonic clock whose step is
the power of two nearest below a quarter of the job's interval (1 s for 5 s), so jobs at the same
backoff are due together and one poll round — one shared Slurm listing (slurm_listing.py) —
serves them all: 1,000 watched jobs at the ceiling cost one round a second, not one every few
milliseconds. The shift is at most half a step (≤ 1/8 of the interval).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass

from jpu.runtime.service import wait_any

_GROWTH = 1.5
_ALIGN = 0.25  # grid step ≤ this share of the interval


def aligned(t: float, interval: float) -> float:
    """`t` moved to the nearest point of the grid for `interval` (a power-of-two step, so
    the grids of all intervals share their points), never earlier than half a step before."""
    step = 2.0 ** math.floor(math.log2(interval * _ALIGN)) if interval > 0 else 0.0
    return round(t / step) * step if step > 0 else t


@dataclass
class Watched:
    job_id: str
    attempt: int
    backend_job_id: str
    interval: float
    due: float  # time.monotonic() of the next poll


class WatchList:
    def __init__(self, poll_min_s: float, poll_max_s: float, align: bool = True) -> None:
        self.poll_min_s, self.align = poll_min_s, align  # align=False: one round per job
        self.poll_max_s = max(poll_max_s, poll_min_s)
        self.jobs: dict[str, Watched] = {}  # by backend job id
        self.wake = asyncio.Event()

    def track(self, job_id: str, attempt: int, backend_job_id: str, urgent: bool = False) -> None:
        w = self.jobs.get(backend_job_id)
        due = self._next(self.poll_min_s)
        if w is None:
            self.jobs[backend_job_id] = Watched(
                job_id, attempt, backend_job_id, self.poll_min_s, due
            )
        elif urgent:
            w.interval, w.due = self.poll_min_s, min(w.due, due)
        self.wake.set()

    def poke(self, backend_job_id: str) -> None:
        """The backend saw this job end: poll it now, not at its backoff."""
        w = self.jobs.get(backend_job_id)
        if w is not None:
            w.due = time.monotonic()
            self.wake.set()

    def due(self) -> list[Watched]:
        now = time.monotonic()
        return [w for w in self.jobs.values() if w.due <= now]

    def backoff(self, w: Watched) -> None:
        w.interval = min(w.interval * _GROWTH, self.poll_max_s)
        w.due = self._next(w.interval)

    def _next(self, interval: float) -> float:
        due = time.monotonic() + interval
        return aligned(due, interval) if self.align else due

    def drop(self, backend_job_id: str) -> None:
        self.jobs.pop(backend_job_id, None)

    def sleep_s(self) -> float:
        if not self.jobs:
            return self.poll_max_s
        return max(min(w.due for w in self.jobs.values()) - time.monotonic(), 0.0)

    async def wait(self, stop: asyncio.Event) -> None:
        """Until the next poll is due, a job is tracked, or stop."""
        self.wake.clear()
        await wait_any(self.sleep_s(), self.wake, stop)
