"""Publish the cycle's queue order and pending reasons to NATS KV (SPEC D1, D7), and the
estimated starts (U4, jpu_services.dispatcher.estimates).

Rank and pending reason are properties of a cycle, not of a job, so they are not events; the
gateway reads the latest `QueueView` from the `jpu_views` bucket (jpu.bus.views: values of any
queue length, compressed and split into parts past one message)."""

from __future__ import annotations

import logging

from jpu.bus import EventBus
from jpu.bus.views import ViewStore
from jpu.commands import EstimatesView, QueueView

log = logging.getLogger(__name__)


class ViewPublisher:
    def __init__(self, bus: EventBus) -> None:
        self.store = ViewStore(bus)
        self._last: tuple[list[str], dict[str, str]] | None = None

    async def publish(self, at: float, seq: int, order: list[str], pending: dict[str, str]) -> None:
        """Best effort: the view is advisory, a failure only delays it to the next cycle."""
        if self._last == (order, pending):
            return
        try:
            await self.store.put_queue(QueueView(at=at, seq=seq, order=order, pending=pending))
            self._last = (list(order), dict(pending))
        except Exception as e:  # never let the view stop dispatching
            log.warning("queue view not published: %r", e)

    async def publish_estimates(self, view: EstimatesView) -> None:
        """SPEC U4, best effort like the queue view."""
        try:
            await self.store.put_estimates(view)
        except Exception as e:
            log.warning("estimates not published: %r", e)
