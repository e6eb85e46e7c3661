"""Injectable clocks: services read time only through a Clock, the policy core never reads it."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float: ...


class SystemClock:
    """Wall-clock seconds (what services use in production)."""

    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock tests and the simulator move by hand."""

    def __init__(self, start: float = 0.0) -> None:
        self._t = start

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock never goes back")
        self._t += seconds
        return self._t

    def set(self, t: float) -> None:
        if t < self._t:
            raise ValueError("a clock never goes back")
        self._t = t
