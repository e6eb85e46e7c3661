"""A cached listing of Slurm jobs that every concurrent caller shares (SPEC X9, the agent's polls).

The slurm-agent polls each watched job on its own schedule; at 1,000 jobs that is ~200 polls a
second, and each must not cost a `squeue`. A listing is refreshed only when the caller needs it
fresher than it is, and — for callers that accept the default age — never more often than
`cost_factor` × what the last refresh took, so watching costs slurmctld and the agent a bounded
share of a core however large the queue grows (bench/bench_slurm.py --watch-jobs) — up to
`max_stale_s`: one slow `squeue` on a busy machine must not leave job ends unseen for long.
A caller that waited while another refreshed takes that refresh (before, each waiter refreshed
again once a refresh took longer than `refresh_s`: at 1,000 jobs `squeue --json` ran back to
back).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from jpu.backends.slurm.parse import SlurmJob

Jobs = dict[int, SlurmJob]


class Listing:
    def __init__(
        self,
        load: Callable[[], Awaitable[Jobs]],
        refresh_s: float,
        cost_factor: float,
        max_stale_s: float = 2.0,
    ) -> None:
        self._load = load
        self.refresh_s, self.cost_factor, self.max_stale_s = refresh_s, cost_factor, max_stale_s
        self.jobs: Jobs = {}
        self.at = -1e9  # time.monotonic() when the current listing was asked for
        self.cost_s = 0.0  # wall time of the last refresh
        self.refreshes = 0
        self._lock = asyncio.Lock()

    def max_age(self) -> float:
        """The default age a caller accepts: refresh_s, or longer when a refresh is costly
        (never beyond max_stale_s)."""
        costly = min(self.cost_factor * self.cost_s, self.max_stale_s)
        return max(self.refresh_s, costly)

    def invalidate(self) -> None:
        self.at = -1e9

    async def get(self, max_age_s: float | None = None) -> tuple[Jobs, bool]:
        """(the jobs, whether this call refreshed them); one refresh serves concurrent callers."""
        max_age = self.max_age() if max_age_s is None else max_age_s
        oldest = time.monotonic() - max_age  # relative to the call, not to when the lock is ours:
        async with self._lock:  # a refresh that started while this caller waited serves it too
            if self.at >= oldest:
                return self.jobs, False
            started = time.monotonic()
            self.jobs = await self._load()
            self.at, self.cost_s = started, time.monotonic() - started
            self.refreshes += 1
            return self.jobs, True


def note_ends(seen: dict[int, float], jobs: Jobs, covers: Callable[[int], bool]) -> None:
    """Keep, per job, the wall clock its end was first seen: set it for jobs newly terminal,
    drop it for jobs running again or gone from a listing that `covers` them."""
    now = time.time()
    for jid, job in jobs.items():
        if job.terminal:
            seen.setdefault(jid, now)
        else:
            seen.pop(jid, None)
    for jid in [j for j in seen if j not in jobs and covers(j)]:
        del seen[jid]


Named = dict[str, Jobs]


class NameLookup:
    """Jobs by exact name for many concurrent callers in one `squeue --name=a,b,…` (a start
    burst looks every attempt up before its sbatch: one squeue per attempt cost as much as the
    sbatch itself). Each caller is answered by a listing that started after it asked, as its
    own squeue would have, so an attempt submitted before the call is always seen."""

    def __init__(self, load: Callable[[list[str]], Awaitable[Named]], batch: int = 200) -> None:
        self._load, self.batch = load, batch
        self._waiting: dict[str, list[asyncio.Future[Jobs]]] = {}
        self._lock = asyncio.Lock()
        self.loads = 0

    async def get(self, name: str) -> Jobs:
        answer: asyncio.Future[Jobs] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(name, []).append(answer)
        async with self._lock:  # whoever holds it answers everyone who asked before its load
            if not answer.done():
                await self._serve(answer)
        return answer.result()

    async def _serve(self, mine: asyncio.Future[Jobs]) -> None:
        waiting, self._waiting = self._waiting, {}
        names = list(waiting)
        try:
            found: Named = {}
            for i in range(0, len(names), self.batch):  # bounded argv
                found |= await self._load(names[i : i + self.batch])
                self.loads += 1
        except asyncio.CancelledError:  # the others are still owed a listing: the next holder
            for name, answers in waiting.items():
                self._waiting.setdefault(name, []).extend(a for a in answers if a is not mine)
            raise
        except Exception as e:
            for answers in waiting.values():
                for a in answers:
                    a.set_exception(e)
            return
        for name, answers in waiting.items():
            for a in answers:
                a.set_result(found.get(name, {}))
