"""Which backend jobs the agent polls, and when: per-job backoff, no busy loop.

A job is polled `poll_min_s` after it starts (or is cancelled), then each unchanged poll waits
1.5× longer up to `poll_max_s`. The watch loop sleeps until the earliest due poll or a wake-up
(a newly tracked or cancelled job).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

_GROWTH = 1.5


@dataclass
class Watched:
    job_id: str
    attempt: int
    backend_job_id: str
    interval: float
    due: float  # time.monotonic() of the next poll


class WatchList:
    def __init__(self, poll_min_s: float, poll_max_s: float) -> None:
        self.poll_min_s = poll_min_s
        self.poll_max_s = max(poll_max_s, poll_min_s)
        self.jobs: dict[str, Watched] = {}  # by backend job id
        self.wake = asyncio.Event()

    def track(self, job_id: str, attempt: int, backend_job_id: str, urgent: bool = False) -> None:
        w = self.jobs.get(backend_job_id)
        due = time.monotonic() + self.poll_min_s
        if w is None:
            self.jobs[backend_job_id] = Watched(
                job_id, attempt, backend_job_id, self.poll_min_s, due
            )
        elif urgent:
            w.interval, w.due = self.poll_min_s, min(w.due, due)
        self.wake.set()

    def due(self) -> list[Watched]:
        now = time.monotonic()
        return [w for w in self.jobs.values() if w.due <= now]

    def backoff(self, w: Watched) -> None:
        w.interval = min(w.interval * _GROWTH, self.poll_max_s)
        w.due = time.monotonic() + w.interval

    def drop(self, backend_job_id: str) -> None:
        self.jobs.pop(backend_job_id, None)

    def sleep_s(self) -> float:
        if not self.jobs:
            return self.poll_max_s
        return max(min(w.due for w in self.jobs.values()) - time.monotonic(), 0.0)

    async def wait(self, stop: asyncio.Event) -> None:
        """Until the next poll is due, a job is tracked, or stop."""
        self.wake.clear()
        waits = [asyncio.ensure_future(self.wake.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waits, timeout=self.sleep_s(), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
