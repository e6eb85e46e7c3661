"""Capped exponential backoff with jitter: the one delay schedule of every retry in the platform
(a service's start, a worker's restart after an outage, a request riding out a JetStream leader
election, SPEC O3/O5). Pure: the random draw is passed in, so a test pins it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Delay before retry `attempt` (0-based): first_s doubling up to cap_s, ± jitter so the
    replicas restarted together do not knock on the bus in step."""

    first_s: float = 0.2
    cap_s: float = 5.0
    factor: float = 2.0
    jitter: float = 0.2  # fraction of the delay, each way

    def delay(self, attempt: int, rand: float) -> float:
        """`rand` in [0, 1): pure, so a test can pin it."""
        base = min(self.first_s * self.factor ** min(attempt, 64), self.cap_s)
        return base * (1.0 - self.jitter + 2.0 * self.jitter * rand)
