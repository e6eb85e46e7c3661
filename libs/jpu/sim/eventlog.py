"""The simulator's event log: the live event types (jpu.events), one JSON object per line, in order.

Event ids are `sim-<n>` (n = position in the log) so two runs of the same input produce
byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, TypeVar

from jpu import events as ev

E = TypeVar("E", bound=ev.Event)


class EventLog:
    """Appends events to a binary stream (or only counts them when `out` is None)."""

    def __init__(self, out: IO[bytes] | None) -> None:
        self._out = out
        self._buf: list[bytes] = []
        self.count = 0

    def emit(self, cls: type[E], ts: float, *, event_id: str | None = None, **fields: Any) -> E:
        self.count += 1
        event = cls(event_id=event_id or f"sim-{self.count}", ts=ts, **fields)
        if self._out is not None:
            self._buf.append(ev.encode(event))
            if len(self._buf) >= 4096:
                self.flush()
        return event

    def flush(self) -> None:
        if self._out is not None and self._buf:
            self._buf.append(b"")
            self._out.write(b"\n".join(self._buf))
            self._buf.clear()


def read_events(path: str | Path) -> list[ev.AnyEvent]:
    """Decode an events.jsonl file (every line must be a valid event)."""
    with Path(path).open("rb") as f:
        return [ev.decode(line) for line in f if line.strip()]
