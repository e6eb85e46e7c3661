"""Leader lease on a NATS KV bucket (SPEC E4: exactly one active dispatcher, others standby).

Bucket `jpu_leases` with a TTL (max age) of `ttl_s`; key `dispatcher.<stream>` holds the holder
id. The leader creates the key when absent and renews it every `renew_s` with `update(last=rev)`
(compare-and-set). A standby retries `create`, which succeeds only once the dead leader's entry
has expired, i.e. within ttl_s + renew_s of its last renewal.

The leader stops acting the instant a renewal fails, and also when its last successful renewal
is older than `ttl_s - margin` (a stalled event loop): `valid()` is checked before every cycle and
before every append batch. Fencing beyond that comes from per-job optimistic concurrency (E2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError, KeyWrongLastSequenceError, NotFoundError
from nats.js.kv import KeyValue

from jpu.bus.streams import bucket_replicas

log = logging.getLogger(__name__)

BUCKET = "jpu_leases"
_STEP_MIN_S = 2.0  # one acquire/renew at most this long (or renew_s): retried at the next step


def holder_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Lease:
    def __init__(
        self,
        js: JetStreamContext,
        key: str,
        holder: str | None = None,
        ttl_s: float = 3.0,
        renew_s: float = 1.0,
    ) -> None:
        self.js, self.key, self.holder = js, key, holder or holder_id()
        self.ttl_s, self.renew_s = ttl_s, renew_s
        self.revision: int | None = None
        self.renewed_at = 0.0  # monotonic time of the last successful create/update
        self.changed = asyncio.Event()  # set whenever leadership is gained or lost
        self._kv: KeyValue | None = None

    def valid(self) -> bool:
        margin = min(self.renew_s, self.ttl_s / 3)
        fresh = time.monotonic() - self.renewed_at < self.ttl_s - margin
        return self.revision is not None and fresh

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            try:
                self._kv = await self.js.key_value(BUCKET)
            except BucketNotFoundError:
                config = KeyValueConfig(
                    bucket=BUCKET, ttl=self.ttl_s, history=1, replicas=bucket_replicas()
                )
                self._kv = await self.js.create_key_value(config)
        return self._kv

    async def step(self) -> bool:
        """Acquire (standby) or renew (leader) once; returns whether we hold the lease now."""
        was = self.revision is not None
        try:
            async with asyncio.timeout(max(self.renew_s, _STEP_MIN_S)):
                kv = await self._bucket()
                if self.revision is None:
                    self.revision = await kv.create(self.key, self.holder.encode())
                else:
                    last = self.revision
                    self.revision = await kv.update(self.key, self.holder.encode(), last=last)
            self.renewed_at = time.monotonic()
        except (KeyWrongLastSequenceError, NotFoundError):
            self.revision = None  # someone else holds it (or our entry expired and was taken)
        except (nats.errors.Error, TimeoutError, OSError) as e:
            # No answer (the bucket's leader lost with its node, SPEC O3): keep the revision and
            # renew it at the next step; `valid()` stops the leader acting once it is stale,
            # and if the entry expired and was taken meanwhile the renewal is refused.
            log.warning("lease %s: %r", self.key, e)
            if time.monotonic() - self.renewed_at >= self.ttl_s:
                self.revision = None
        held = self.revision is not None
        if held != was:
            log.info(
                "lease %s %s",
                self.key,
                "acquired" if held else "lost",
                extra={"holder": self.holder},
            )
            self.changed.set()
        return held

    async def run(self, stop: asyncio.Event) -> None:
        """Acquire/renew every `renew_s` until stop; then give the lease up at once."""
        try:
            while not stop.is_set():
                await self.step()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.renew_s)
        finally:
            await self.release()

    async def release(self) -> None:
        """Delete our entry so a standby takes over without waiting for the TTL."""
        if self.revision is None or self._kv is None:
            return
        revision, self.revision = self.revision, None
        with contextlib.suppress(Exception):
            await self._kv.delete(self.key, last=revision)
        self.changed.set()
