"""The simulator's event log: the live event types (jpu.events), one JSON object per line, in order.

Event ids are `sim-<n>` (n = position in the log; charges keep accounting's derived ids), so
two runs of the same input produce byte-identical files.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, TypeVar

import msgspec

from jpu import events as ev

E = TypeVar("E", bound=ev.Event)
_KEEP_IDS = ("chg-", "init-")  # accounting's ids, derived from their source (F5)


class EventLog:
    """Appends events to a binary stream (or only counts them when `out` is None)."""

    def __init__(self, out: IO[bytes] | None) -> None:
        self._out = out
        self._buf: list[bytes] = []
        self.count = 0

    def append(self, event: E) -> E:
        """Log one event; the ones decided without an id (the services' pure decisions leave
        it to the writer, or draw a random one) get `sim-<n>`, an id of its own is kept
        (accounting's `chg-<source>`)."""
        self.count += 1
        if not event.event_id or not event.event_id.startswith(_KEEP_IDS):
            event = msgspec.structs.replace(event, event_id=f"sim-{self.count}")
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
