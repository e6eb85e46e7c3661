"""Snapshots of the services' shared fold in JetStream's object store (issue 11).

Why the object store: a snapshot lives beside the log it summarises (same servers, same
replication, same backups), needs no other dependency at start (every service already has NATS;
intake, dispatcher and backfill have no database), and objects are chunked and digest-checked by
the server, so a multi-megabyte state is fine and an interrupted put never becomes visible.
One bucket (`jpu_snapshots`), one object per snapshot, named `<stream>.state.<seq>`; the newest
`keep` are kept. Any service that folds the log may write one; a start loads the newest valid one
and replays only the tail (jpu.bus.fold_follow). The frame and its checks: jpu.domain.codec.
"""

from __future__ import annotations

import io
import logging
import re
import time
from typing import Final

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.object_store import ObjectStore

from jpu.config import Cluster
from jpu.domain.cluster import ClusterState
from jpu.domain.codec import Header, SnapshotInvalid, pack, read_header, unpack

log = logging.getLogger(__name__)

BUCKET: Final = "jpu_snapshots"


async def _fetch(store: ObjectStore, name: str) -> bytes:
    """The object's bytes. Into a buffer: nats-py's `get` without one appends each chunk to a
    bytes object (quadratic: seconds for a snapshot of tens of MB)."""
    buf = io.BytesIO()
    await store.get(name, writeinto=buf)
    return buf.getvalue()


class SnapshotStore:
    def __init__(
        self, js: JetStreamContext, stream: str, *, keep: int = 3, replicas: int = 1
    ) -> None:
        self.js, self.stream, self.keep, self.replicas = js, stream, max(keep, 1), replicas
        self._store: ObjectStore | None = None
        self._name = re.compile(rf"^{re.escape(stream)}\.state\.(\d+)$")

    async def _bucket(self) -> ObjectStore:
        if self._store is None:
            try:
                self._store = await self.js.object_store(BUCKET)
            except BucketNotFoundError:
                config = ObjectStoreConfig(
                    bucket=BUCKET,
                    description="JPU-Share domain state snapshots (issue 11)",
                    storage=StorageType.FILE,
                    replicas=self.replicas,
                )
                self._store = await self.js.create_object_store(BUCKET, config=config)
        return self._store

    async def seqs(self) -> list[int]:
        """Sequences of the stored snapshots of this stream, newest first."""
        store = await self._bucket()
        try:
            infos = await store.list(ignore_deletes=True)
        except NotFoundError:  # an empty bucket
            return []
        found = [int(m.group(1)) for i in infos if (m := self._name.match(i.name or ""))]
        return sorted(found, reverse=True)

    async def save(self, state: ClusterState) -> Header:
        """Write a snapshot of `state` now (see `put`)."""
        data = pack(state, self.stream, time.time())
        await self.put(data, state.seq)
        return read_header(data)[0]

    async def put(self, data: bytes, seq: int) -> None:
        """Store a packed snapshot covering `seq`, then drop all but the newest `keep`."""
        store = await self._bucket()
        await store.put(f"{self.stream}.state.{seq:015d}", data)
        for old in (await self.seqs())[self.keep :]:
            try:
                await store.delete(f"{self.stream}.state.{old:015d}")
            except (NotFoundError, nats.errors.Error) as e:
                log.warning("snapshot %d not pruned: %r", old, e)

    async def load(
        self, cluster: Cluster, last_seq: int, *, at_or_before: bool = False
    ) -> tuple[Header, ClusterState] | None:
        """The newest usable snapshot covering at most `last_seq` (the stream's end now).

        A snapshot ahead of the stream, from another schema version, or failing its checksum is
        skipped with a warning, then the next older one is tried; None: replay from seq 1.
        `at_or_before`: `last_seq` is a point in the log a reader starts from (jpu.explain), not
        the stream's end, so newer snapshots are skipped silently."""
        try:
            seqs = await self.seqs()
            store = await self._bucket()
        except (nats.errors.Error, TimeoutError) as e:
            log.warning("snapshots unavailable (%r): replaying the log from seq 1", e)
            return None
        for seq in seqs:
            name = f"{self.stream}.state.{seq:015d}"
            if seq > last_seq:
                if at_or_before:
                    continue
                log.warning(
                    "snapshot %s is ahead of the stream (last seq %d): ignored", name, last_seq
                )
                continue
            try:
                header, state = unpack(await _fetch(store, name), cluster)
            except SnapshotInvalid as e:
                log.warning("snapshot %s ignored: %s", name, e)
                continue
            except (nats.errors.Error, TimeoutError) as e:  # digest mismatch, lost chunk...
                log.warning("snapshot %s unreadable (%r): ignored", name, e)
                continue
            if header.stream != self.stream or header.seq != seq:
                log.warning("snapshot %s is of %s seq %d: ignored", name, header.stream, header.seq)
                continue
            return header, state
        return None
