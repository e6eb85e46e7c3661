"""Publish the cycle's queue order and pending reasons to NATS KV (SPEC D1, D7), and the
estimated starts (U4, services/dispatcher/estimates.py).

Rank and pending reason are properties of a cycle, not of a job, so they are not events; the
gateway reads the latest `QueueView` from the `jpu_views` bucket (jpu.commands)."""

from __future__ import annotations

import logging

from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from jpu.commands import (
    VIEWS_BUCKET,
    EstimatesView,
    QueueView,
    encode_estimates,
    encode_view,
    estimates_view_key,
    queue_view_key,
)

log = logging.getLogger(__name__)


class ViewPublisher:
    def __init__(self, js: JetStreamContext, stream: str) -> None:
        self.js, self.key = js, queue_view_key(stream)
        self.estimates_key = estimates_view_key(stream)
        self._kv: KeyValue | None = None
        self._last: tuple[list[str], dict[str, str]] | None = None

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(VIEWS_BUCKET)
            except BucketNotFoundError:
                self._kv = await self.js.create_key_value(
                    KeyValueConfig(bucket=VIEWS_BUCKET, history=1)
                )
        return self._kv

    async def publish(self, at: float, seq: int, order: list[str], pending: dict[str, str]) -> None:
        """Best effort: the view is advisory, a failure only delays it to the next cycle."""
        if self._last == (order, pending):
            return
        try:
            kv = await self._bucket()
            view = QueueView(at=at, seq=seq, order=order, pending=pending)
            await kv.put(self.key, encode_view(view))
            self._last = (list(order), dict(pending))
        except Exception as e:  # never let the view stop dispatching
            log.warning("queue view not published: %s", e)

    async def publish_estimates(self, view: EstimatesView) -> None:
        """SPEC U4, best effort like the queue view."""
        try:
            kv = await self._bucket()
            await kv.put(self.estimates_key, encode_estimates(view))
        except Exception as e:
            log.warning("estimates not published: %s", e)
