"""Values of any size in the NATS KV bucket of advisory views (`jpu_views`: the dispatcher's
queue decision and estimated starts, jpu.commands).

A view grows with the queue: about 66 bytes a queued job for ranks and reasons, 57 for
estimates, so one KV value (one message: 1 MiB by NATS's default `max_payload`) held at most
~15,000 queued jobs; past that every put failed and the API lost every rank. Here a value is
compressed (zlib level 1: the hex job ids halve) and, when still too large, split into parts:

- head `<key>`: `Head` (generation, slot, parts, size, CRC-32), written last;
- parts `<key>.<slot>.<i>`, each prefixed by the generation it belongs to.

Two slots alternate, so a put never overwrites the parts the current head points at; a reader
that sees a part of another generation (a second put overtook it) or a bad CRC reads the head
again. A reader never decodes a mix of two values. Part keys are reused (no tombstone per put);
parts a shorter value no longer needs stay until a longer value overwrites them: bounded by
the largest view ever written.
"""

from __future__ import annotations

import asyncio
import secrets
import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar, cast

import msgspec
from nats.js.api import KeyValueConfig
from nats.js.errors import BucketNotFoundError, KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from jpu import commands
from jpu.bus.streams import bucket_replicas

if TYPE_CHECKING:
    from jpu.bus.client import EventBus

_HEADROOM: Final = 8 * 1024  # a part's key, generation prefix and message headers
DEFAULT_PART: Final = 1024 * 1024 - _HEADROOM  # under NATS's default max_payload
_THREAD_AT: Final = 256 * 1024  # compress/decompress larger values off the event loop
_GEN: Final = struct.Struct(">Q")
T = TypeVar("T")


class Head(msgspec.Struct, frozen=True):
    gen: int
    slot: int
    parts: int
    size: int  # compressed bytes
    crc: int  # CRC-32 of the compressed bytes


_head_decoder: Final = msgspec.json.Decoder(Head)


def part_size_for(max_payload: int | None) -> int:
    """Bytes of payload per part for a server's `max_payload` (None: NATS's default)."""
    if not max_payload:
        return DEFAULT_PART
    return max(4096, max_payload - _HEADROOM)


def part_key(key: str, slot: int, i: int) -> str:
    return f"{key}.{slot}.{i}"


async def _zip(data: bytes, level: int = 1) -> bytes:
    if len(data) >= _THREAD_AT:
        return await asyncio.to_thread(zlib.compress, data, level)
    return zlib.compress(data, level)


async def _unzip(data: bytes) -> bytes:
    if len(data) >= _THREAD_AT // 2:
        return await asyncio.to_thread(zlib.decompress, data)
    return zlib.decompress(data)


async def _get(kv: KeyValue, key: str) -> bytes | None:
    try:
        entry = await kv.get(key)
    except (KeyNotFoundError, NotFoundError):
        return None
    return entry.value if entry is not None else None


class LargeValue:
    """One key's writer (the leading dispatcher) and reader (the gateway): `put` / `get`.

    `get` keeps the last value it decoded and returns it again while the head is unchanged, so
    a reader pays for the parts and the decompression once per put, not once per request."""

    def __init__(self, kv: KeyValue, key: str, part_size: int = DEFAULT_PART) -> None:
        self.kv, self.key, self.part_size = kv, key, part_size
        self._slot: int | None = None  # the slot the head points at (None: not read yet)
        self._cached: tuple[bytes, bytes] | None = None  # (raw head, value)

    async def put(self, data: bytes) -> None:
        if self._slot is None:
            raw = await _get(self.kv, self.key)
            head = _decode_head(raw) if raw else None
            self._slot = head.slot if head is not None else 1
        slot = 1 - self._slot
        packed = await _zip(data)
        gen = secrets.randbits(63)  # two writers (a failover overlap) never share a generation
        prefix = _GEN.pack(gen)
        n = max(1, -(-len(packed) // self.part_size))
        for i in range(n):
            chunk = packed[i * self.part_size : (i + 1) * self.part_size]
            await self.kv.put(part_key(self.key, slot, i), prefix + chunk)
        head = Head(gen=gen, slot=slot, parts=n, size=len(packed), crc=zlib.crc32(packed))
        await self.kv.put(self.key, msgspec.json.encode(head))
        self._slot = slot

    async def get(self, attempts: int = 5) -> bytes | None:
        """The value of the newest head (None: never written, or torn on every attempt)."""
        for attempt in range(attempts):
            raw = await _get(self.kv, self.key)
            if raw is None:
                return None
            if self._cached is not None and self._cached[0] == raw:
                return self._cached[1]
            head = _decode_head(raw)
            if head is None:
                return None
            value = await self._parts(head)
            if value is not None:
                self._cached = (raw, value)
                return value
            await asyncio.sleep(0.005 * (attempt + 1))  # a put is under way: its head comes next
        return None

    async def _parts(self, head: Head) -> bytes | None:
        keys = [part_key(self.key, head.slot, i) for i in range(head.parts)]
        got = await asyncio.gather(*(_get(self.kv, k) for k in keys))
        prefix = _GEN.pack(head.gen)
        if any(p is None or p[: _GEN.size] != prefix for p in got):
            return None
        packed = b"".join(p[_GEN.size :] for p in got if p is not None)
        if len(packed) != head.size or zlib.crc32(packed) != head.crc:
            return None
        return await _unzip(packed)


def _decode_head(raw: bytes) -> Head | None:
    try:
        return _head_decoder.decode(raw)
    except msgspec.DecodeError:
        return None  # not a head (e.g. a value an older release wrote whole): no view yet


class ViewStore:
    """The `jpu_views` bucket of one stream, for the writer (the leading dispatcher: creates
    the bucket) and the readers (the gateway: a missing bucket is no view yet)."""

    def __init__(self, bus: EventBus) -> None:
        self.js, self.stream = bus.js, bus.stream
        self.part_size = part_size_for(getattr(bus.nc, "max_payload", None))
        self._values: dict[str, LargeValue] = {}
        self._decoded: dict[str, tuple[bytes, Any]] = {}  # key -> (bytes, what they decode to)

    async def _value(self, key: str, create: bool) -> LargeValue | None:
        got = self._values.get(key)
        if got is None:
            try:
                kv = await self.js.key_value(commands.VIEWS_BUCKET)
            except BucketNotFoundError:
                if not create:
                    return None
                kv = await self.js.create_key_value(
                    KeyValueConfig(
                        bucket=commands.VIEWS_BUCKET, history=1, replicas=bucket_replicas()
                    )
                )
            got = self._values[key] = LargeValue(kv, key, self.part_size)
        return got

    async def _put(self, key: str, data: bytes) -> None:
        value = await self._value(key, create=True)
        assert value is not None
        await value.put(data)

    async def _read(self, key: str, decode: Callable[[bytes], T]) -> T | None:
        """Decoded once per put: `LargeValue.get` hands back the same bytes object while the
        head is unchanged, so a request in between reuses the decoded view."""
        value = await self._value(key, create=False)
        data = await value.get() if value is not None else None
        if not data:
            return None
        got = self._decoded.get(key)
        if got is None or got[0] is not data:
            got = self._decoded[key] = (data, decode(data))
        return cast(T, got[1])

    async def put_queue(self, view: commands.QueueView) -> None:
        await self._put(commands.queue_view_key(self.stream), commands.encode_view(view))

    async def put_estimates(self, view: commands.EstimatesView) -> None:
        key = commands.estimates_view_key(self.stream)
        await self._put(key, commands.encode_estimates(view))

    async def queue(self) -> commands.QueueView | None:
        """The dispatcher's latest published decision (None before its first cycle)."""
        return await self._read(commands.queue_view_key(self.stream), commands.decode_view)

    async def estimates(self) -> commands.EstimatesView | None:
        """The dispatcher's latest estimated starts (U4; None before its first estimate)."""
        key = commands.estimates_view_key(self.stream)
        return await self._read(key, commands.decode_estimates)
