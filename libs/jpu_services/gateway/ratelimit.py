"""Per-user submit rate limit: one token bucket per user, in the gateway's memory (SPEC §8 429).

Each gateway replica limits on its own; with N replicas behind a balancer a user gets at most
N × the rate, which is what an operator expects from a per-process limiter (documented choice).
A bucket holds `burst` tokens and refills at `rate_per_s`; a submit takes one token, and when the
bucket is empty the caller learns how long until the next token (the `Retry-After` header).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from jpu.config import Config

_MAX_BUCKETS = 10_000  # forget the oldest idle buckets beyond this (memory bound)


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class RateLimiter:
    rate_per_s: float = 2.0  # sustained submits per second per user
    burst: int = 20  # submits back to back (a sweep of jobs from a script)
    clock: Callable[[], float] = time.monotonic
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.rate_per_s > 0 and self.burst > 0

    def take(self, key: str) -> float:
        """Take one token for `key`: 0.0 when allowed, else seconds until a token is available."""
        if not self.enabled:
            return 0.0
        now = self.clock()
        b = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
        b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.rate_per_s)
        b.at = now
        self._buckets[key] = b  # re-insert: dict order = least recently used first
        if len(self._buckets) > _MAX_BUCKETS:
            del self._buckets[next(iter(self._buckets))]
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return 0.0
        return (1.0 - b.tokens) / self.rate_per_s


def retry_after_header(wait_s: float) -> str:
    """`Retry-After` is whole seconds; never 0 for a refused request."""
    return str(max(1, math.ceil(wait_s)))


def from_settings(config: Config) -> RateLimiter:
    """Limits from the configuration (`submit_rate_per_s`, `submit_burst`; JPU_* overridable)."""
    return RateLimiter(rate_per_s=config.submit_rate_per_s, burst=config.submit_burst)
