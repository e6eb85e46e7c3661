"""The backup file (`jpu-admin backup` / `restore`, docs/operations.md): one file, read and
written as a stream of frames, never held whole in memory.

Layout, version 1:

    b"JPUBAK1\\n"                       8 bytes: what the file is and its layout version
    frame*                              each: 4-byte big-endian length N, then N bytes of
                                        MessagePack: a map whose "k" says what it is
    the `end` frame                     {"k": "end", "frames": n, "sha256": hex}: n frames before
                                        it; the SHA-256 of every byte before it (magic included)

Frames, in this order:
    header      {format, version, created_at, stream, prefix, migrations}
    table       {name}; then row {v: the row as JSON text}*; then table_end {name, rows}
                (PostgreSQL state the log does not hold: labs, users, tokens, the notifier's
                sent-log; written before the streams so that nothing in them is ahead of the log)
    stream      {name, config (the JetStream API's JSON, durations in ns), first_seq, last_seq}
                then msg {seq, subject, headers (map or nil), data (bytes), time_ns}* in stream
                order; then stream_end {name, messages, last_seq}
    end

Everything a restore needs to check before it touches a server is checked by `verify`: the magic,
that no frame is cut short, the frame kinds in order, sequences increasing within a stream,
the counts, and the checksum. A fault is named with where it is (frame number, byte offset).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, Final, Protocol

import msgspec

MAGIC: Final = b"JPUBAK1\n"
FORMAT: Final = "jpu-backup"
VERSION: Final = 1
_LEN: Final = struct.Struct(">I")
MAX_FRAME: Final = 64 * 1024 * 1024  # a message is at most a few MB (max_msg_size); a larger
# length is a corrupted one, not a frame to allocate

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class Readable(Protocol):
    def read(self, n: int, /) -> bytes: ...


class BackupInvalid(Exception):
    """The file is not a complete, intact backup this version can read: one sentence why."""


class Writer:
    """Frames to a binary file object, hashing as it goes; `close()` writes the end frame."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.sha = hashlib.sha256()
        self.frames = 0
        self._write(MAGIC)

    def _write(self, data: bytes) -> None:
        self.out.write(data)
        self.sha.update(data)

    def frame(self, kind: str, **fields: Any) -> None:
        body = _encoder.encode({"k": kind, **fields})
        self._write(_LEN.pack(len(body)) + body)
        self.frames += 1

    def close(self) -> None:
        body = _encoder.encode({"k": "end", "frames": self.frames, "sha256": self.sha.hexdigest()})
        self.out.write(_LEN.pack(len(body)) + body)
        self.out.flush()


def frames(f: Readable, name: str = "backup") -> Iterator[dict[str, Any]]:
    """Every frame after the magic, the end frame included, with its framing checked (not its
    checksum: see `verify`)."""
    magic = f.read(len(MAGIC))
    if len(magic) < len(MAGIC) and MAGIC.startswith(magic):
        raise BackupInvalid(f"{name}: truncated: {len(magic)} bytes, not even the file's magic")
    if magic != MAGIC:
        if magic[:6] == MAGIC[:6]:
            raise BackupInvalid(f"{name}: layout {magic[6:7]!r} is not one this tool reads (1)")
        raise BackupInvalid(f"{name}: not a JPU-Share backup (it does not start with {MAGIC!r})")
    offset, n = len(MAGIC), 0
    mark = getattr(f, "mark", None)
    while True:
        if mark is not None:
            mark()  # the frame read next may be the end record: its checksum stops here
        head = f.read(_LEN.size)
        if not head:
            raise BackupInvalid(
                f"{name}: truncated: it ends after frame {n} at byte {offset} without its end "
                "record (and checksum)"
            )
        if len(head) < _LEN.size:
            raise BackupInvalid(
                f"{name}: truncated inside the length of frame {n + 1} at byte {offset}"
            )
        (length,) = _LEN.unpack(head)
        if length > MAX_FRAME:
            raise BackupInvalid(
                f"{name}: corrupted: frame {n + 1} at byte {offset} claims {length} bytes"
            )
        body = f.read(length)
        if len(body) < length:
            raise BackupInvalid(
                f"{name}: truncated: frame {n + 1} at byte {offset} has {len(body)} of its "
                f"{length} bytes"
            )
        try:
            frame = _decoder.decode(body)
        except msgspec.DecodeError as e:
            raise BackupInvalid(f"{name}: corrupted: frame {n + 1} at byte {offset}: {e}") from e
        if not isinstance(frame, dict) or not isinstance(frame.get("k"), str):
            raise BackupInvalid(f"{name}: corrupted: frame {n + 1} at byte {offset} has no kind")
        n += 1
        offset += _LEN.size + length
        frame["_at"] = (n, offset - _LEN.size - length)
        if frame["k"] == "end" and f.read(1):
            raise BackupInvalid(f"{name}: corrupted: bytes after the end record (byte {offset})")
        yield frame
        if frame["k"] == "end":
            return


@dataclass
class StreamSummary:
    name: str
    config: dict[str, Any]
    first_seq: int
    last_seq: int
    messages: int = 0


@dataclass
class Summary:
    """What `verify` found: enough to decide, before touching a server, whether to restore."""

    header: dict[str, Any]
    streams: list[StreamSummary] = field(default_factory=list)
    tables: dict[str, int] = field(default_factory=dict)
    frames: int = 0
    size: int = 0


def verify(f: Readable, name: str = "backup") -> Summary:
    """Read the whole file once (streaming): framing, order, counts and the SHA-256 of the end
    record. Raises BackupInvalid naming the first fault."""
    try:
        return _verify(f, name)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a record of the wrong shape
        raise BackupInvalid(f"{name}: corrupted: a record lacks or mangles {e}") from e


def _verify(f: Readable, name: str) -> Summary:
    sha = hashlib.sha256()
    hashing = _Hashing(f, sha)
    summary: Summary | None = None
    stream: StreamSummary | None = None
    table: str | None = None
    rows = 0
    last = 0
    for frame in frames(hashing, name):
        k, (n, at) = frame["k"], frame.pop("_at")
        where = f"frame {n} (byte {at})"
        if summary is None:
            if k != "header" or frame.get("format") != FORMAT:
                raise BackupInvalid(f"{name}: corrupted: {where} is not the backup's header")
            if frame.get("version") != VERSION:
                raise BackupInvalid(
                    f"{name}: format version {frame.get('version')} is not one this tool reads "
                    f"({VERSION})"
                )
            summary = Summary(header=frame)
            continue
        if k == "end":
            digest = hashing.digest_before_end
            if (stream, table) != (None, None):
                raise BackupInvalid(f"{name}: truncated: the end record comes inside a section")
            if frame.get("frames") != n - 1:
                raise BackupInvalid(
                    f"{name}: corrupted: the end record counts {frame.get('frames')} frames, "
                    f"the file has {n - 1}"
                )
            if frame.get("sha256") != digest:
                raise BackupInvalid(
                    f"{name}: checksum mismatch: the end record says sha256 "
                    f"{frame.get('sha256')}, the contents hash to {digest} (corrupted)"
                )
            summary.frames, summary.size = n, hashing.size
            return summary
        if k == "stream" and stream is None and table is None:
            stream = StreamSummary(
                str(frame["name"]), dict(frame["config"]), int(frame["first_seq"]),
                int(frame["last_seq"]),
            )  # fmt: skip
            last = 0
        elif k == "msg" and stream is not None:
            seq = frame.get("seq")
            if not isinstance(seq, int) or seq <= last:
                raise BackupInvalid(
                    f"{name}: corrupted: {where}: seq {seq} of stream {stream.name} does not "
                    f"follow {last}"
                )
            if not isinstance(frame.get("subject"), str) or not isinstance(
                frame.get("data"), bytes
            ):
                raise BackupInvalid(f"{name}: corrupted: {where}: a message without subject/data")
            last = seq
            stream.messages += 1
        elif k == "stream_end" and stream is not None:
            if frame.get("messages") != stream.messages or frame.get("name") != stream.name:
                raise BackupInvalid(
                    f"{name}: corrupted: stream {stream.name} ends claiming "
                    f"{frame.get('messages')} messages, the file has {stream.messages}"
                )
            if int(frame.get("last_seq", 0)) < last:
                raise BackupInvalid(f"{name}: corrupted: stream {stream.name}'s last seq")
            stream.last_seq = int(frame["last_seq"])
            summary.streams.append(stream)
            stream = None
        elif k == "table" and stream is None and table is None:
            table, rows = str(frame["name"]), 0
        elif k == "row" and table is not None:
            if not isinstance(frame.get("v"), str):
                raise BackupInvalid(f"{name}: corrupted: {where}: a row of {table} without data")
            rows += 1
        elif k == "table_end" and table is not None:
            if frame.get("rows") != rows:
                raise BackupInvalid(
                    f"{name}: corrupted: table {table} ends claiming {frame.get('rows')} rows, "
                    f"the file has {rows}"
                )
            summary.tables[table] = rows
            table = None
        else:
            raise BackupInvalid(f"{name}: corrupted: {where}: unexpected '{k}' record here")
    raise AssertionError("frames() ends only after the end record")  # pragma: no cover


class _Hashing:
    """A reader that hashes what passes through, keeping the digest as it was before the last
    frame read (the end frame is not part of its own checksum)."""

    def __init__(self, f: Readable, sha: Any) -> None:
        self.f, self.sha, self.size = f, sha, 0
        self.digest_before_end = ""

    def mark(self) -> None:
        self.digest_before_end = self.sha.hexdigest()

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        self.size += len(data)
        self.sha.update(data)
        return data
