"""Snapshots of the services' shared fold in JetStream's object store (SPEC O6).

Why the object store: a snapshot lives beside the log it summarises (same servers, same
replication, same backups), needs no other dependency at start (every service already has NATS;
intake, dispatcher and backfill have no database), and objects are chunked and digest-checked by
the server, so a multi-megabyte state is fine and an interrupted put never becomes visible.
One bucket (`jpu_snapshots`), one object per snapshot, named `<stream>.state.<seq>`; the newest
`keep` are kept, and a thinning history of older ones (`retained`: the first of each of the last
`snapshot_hourly` hours, `snapshot_daily` days and `snapshot_weekly` weeks), so that the
explanations of a long log (`/wait` of a job submitted months ago, `queue?at=` a past moment)
start from a snapshot shortly before the moment they explain instead of from seq 1. Any
service that folds the log may write one; a start loads the newest valid one and replays only
the tail (jpu.bus.fold_follow). The frame and its checks: jpu.domain.codec.
"""

from __future__ import annotations

import io
import logging
import re
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Final

import nats.errors
from nats.js import JetStreamContext
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.object_store import ObjectStore

from jpu.bus.streams import bucket_replicas
from jpu.config import Cluster, Config
from jpu.domain.cluster import ClusterState
from jpu.domain.codec import Header, SnapshotInvalid, pack, read_header, unpack

log = logging.getLogger(__name__)

BUCKET: Final = "jpu_snapshots"
HOUR: Final = 3600.0
DAY: Final = 24 * HOUR
WEEK: Final = 7 * DAY


def history_of(config: Config) -> tuple[tuple[float, int], ...]:
    """The configured thinning: (bucket length in seconds, how many of the latest buckets)."""
    return (
        (HOUR, config.snapshot_hourly),
        (DAY, config.snapshot_daily),
        (WEEK, config.snapshot_weekly),
    )


def retained(
    snaps: Iterable[tuple[int, float]], keep: int, history: Sequence[tuple[float, int]] = ()
) -> set[int]:
    """Of snapshots (seq, written at), those to keep: the newest `keep` by seq, and for each
    (length, count) of `history` the oldest one in each of the `count` latest buckets of that
    length (counted back from the newest snapshot's). The oldest of a bucket stays the same as
    the bucket fills, so a put deletes only what it makes redundant."""
    snaps = sorted(snaps, reverse=True)  # newest first
    out = {seq for seq, _ in snaps[: max(keep, 1)]}
    if not snaps:
        return out
    newest = max(t for _, t in snaps)
    for length, count in history:
        if count <= 0:
            continue
        last = int(newest // length)
        first: dict[int, int] = {}
        for seq, t in snaps:  # newest first: the last seen of a bucket is its oldest
            b = int(t // length)
            if last - b < count:
                first[b] = seq
        out.update(first.values())
    return out


async def _fetch(store: ObjectStore, name: str) -> bytes:
    """The object's bytes. Into a buffer: nats-py's `get` without one appends each chunk to a
    bytes object (quadratic: seconds for a snapshot of tens of MB)."""
    buf = io.BytesIO()
    await store.get(name, writeinto=buf)
    return buf.getvalue()


class SnapshotStore:
    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        *,
        keep: int = 3,
        replicas: int = 1,
        history: Sequence[tuple[float, int]] = (),
    ) -> None:
        self.js, self.stream, self.keep, self.replicas = js, stream, max(keep, 1), replicas
        self.history = tuple(history)
        self._store: ObjectStore | None = None
        self._name = re.compile(rf"^{re.escape(stream)}\.state\.(\d+)$")

    async def _bucket(self) -> ObjectStore:
        if self._store is None:
            try:
                self._store = await self.js.object_store(BUCKET)
            except BucketNotFoundError:
                config = ObjectStoreConfig(
                    bucket=BUCKET,
                    description="JPU-Share domain state snapshots (SPEC O6)",
                    storage=StorageType.FILE,
                    replicas=self.replicas,
                )
                self._store = await self.js.create_object_store(BUCKET, config=config)
        return self._store

    @classmethod
    def configured(cls, js: JetStreamContext, stream: str, config: Config) -> SnapshotStore:
        return cls(
            js,
            stream,
            keep=config.snapshot_keep,
            replicas=bucket_replicas(),
            history=history_of(config),
        )

    async def _written(self) -> list[tuple[int, float]]:
        """(seq, time written) of this stream's stored snapshots."""
        store = await self._bucket()
        try:
            infos = await store.list(ignore_deletes=True)
        except NotFoundError:  # an empty bucket
            return []
        out = []
        for i in infos:
            m = self._name.match(i.name or "")
            if m:
                try:
                    t = datetime.fromisoformat(i.mtime or "").timestamp()
                except ValueError:
                    t = 0.0
                out.append((int(m.group(1)), t))
        return out

    async def seqs(self) -> list[int]:
        """Sequences of the stored snapshots of this stream, newest first."""
        return sorted((seq for seq, _ in await self._written()), reverse=True)

    async def save(self, state: ClusterState) -> Header:
        """Write a snapshot of `state` now (see `put`)."""
        data = pack(state, self.stream, time.time())
        await self.put(data, state.seq)
        return read_header(data)[0]

    async def put(self, data: bytes, seq: int) -> None:
        """Store a packed snapshot covering `seq`, then drop what `retained` does not keep."""
        store = await self._bucket()
        await store.put(f"{self.stream}.state.{seq:015d}", data)
        written = await self._written()
        keep = retained(written, self.keep, self.history)
        for old in sorted(s for s, _ in written if s not in keep):
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
