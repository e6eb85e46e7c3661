"""The leading dispatcher's estimated starts (SPEC U4), recomputed at a bounded cadence and
published to the NATS KV bucket `jpu_views` (key `estimates.<stream>`, jpu.commands).

Off the hot path: the `Present` (a copy of what the estimate needs) is taken from the fold
between two cycles, on the event loop, and the forward simulation runs in a worker thread, so a
dispatch cycle never waits for it (the thread only shares the GIL). One estimate at a time.

Cadence: at most every `estimate_every_s`; after a big change (maintenance changed, the queue
grew or shrank by a tenth or by 10 jobs) as soon as a fifth of that has passed since the last.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from jpu.commands import EstimatesView
from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.explain.estimate import present
from jpu.sim.forward import EstimateParams, ForwardResult, Present, forward
from jpu_services.dispatcher.view import ViewPublisher

log = logging.getLogger(__name__)


@dataclass
class Estimator:
    config: Config
    state: ClusterState
    view: ViewPublisher
    last_at: float = float("-inf")  # monotonic time of the last start
    computed: int = 0
    cpu_s: float = 0.0  # CPU seconds of the last estimate (thread time)
    _task: asyncio.Task[None] | None = None
    _basis: tuple[str, int] = ("", -1)  # (maintenance, queue length) of the last estimate

    @property
    def every_s(self) -> float:
        return self.config.estimate_every_s

    def _big_change(self) -> bool:
        m, n = self._basis
        now_n = len(self.state.queue) + sum(len(p) for p in self.state.personal.values())
        return m != self.state.maintenance.state or abs(now_n - n) >= max(10, n // 10)

    def due(self) -> bool:
        if self.every_s <= 0 or (self._task is not None and not self._task.done()):
            return False
        elapsed = time.monotonic() - self.last_at
        return elapsed >= self.every_s or (elapsed >= self.every_s / 5 and self._big_change())

    def maybe_start(self, now: float) -> None:
        """Between cycles: take the Present now, simulate in a thread, publish when done."""
        if not self.due():
            return
        self.last_at = time.monotonic()
        p = present(self.state, self.config, now)  # durations from state.runs (U4)
        n = len(self.state.queue) + sum(len(q) for q in self.state.personal.values())
        self._basis = (self.state.maintenance.state, n)
        seq = self.state.seq
        params = EstimateParams(
            horizon_s=self.config.estimate_horizon_s,
            max_cycles=self.config.estimate_max_cycles,
        )
        self._task = asyncio.create_task(self._run(p, params, seq))

    async def _run(self, p: Present, params: EstimateParams, seq: int) -> None:
        try:
            result, cpu = await asyncio.to_thread(_timed_forward, p, params)
            self.cpu_s, self.computed = cpu, self.computed + 1
            await self.view.publish_estimates(_view(result, seq))
        except Exception as e:  # advisory: never let it stop dispatching
            log.warning("estimates not computed: %r", e)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)


def _timed_forward(p: Present, params: EstimateParams) -> tuple[ForwardResult, float]:
    c0 = time.thread_time()
    result = forward(p, params)
    return result, time.thread_time() - c0


def _view(result: ForwardResult, seq: int) -> EstimatesView:
    why: dict[str, list[str]] = {}
    for j, e in result.estimates.items():
        if e.why is not None:
            why.setdefault(e.why, []).append(j)
    return EstimatesView(
        at=result.at,
        seq=seq,
        jobs={j: (e.start, e.basis) for j, e in result.estimates.items()},
        complete=result.complete,
        why=why,
    )
