"""SPEC SEC5: failed authentications are throttled per client address.

Without a limit a client tried 300 wrong bearer tokens in 0.2 s. Here a client with `limit`
failures within the last `window_s` seconds is refused (429, `Retry-After`) until the oldest of
them leaves the window; then one more try is allowed, and so on: at most `limit` guesses per
window, whatever the client does. Successful requests never count, and other clients are not
affected. Pure: the gateway's edge (jpu_services.gateway.deps) passes `now` and the address.

Memory is bounded: beyond `max_clients` addresses the least recently failing one is forgotten
(an attacker spraying addresses gains at most a fresh window for old ones).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MAX_CLIENTS = 10_000


@dataclass
class AuthThrottle:
    limit: int = 20  # 0: no throttling
    window_s: float = 60.0
    max_clients: int = MAX_CLIENTS
    _fails: dict[str, deque[float]] = field(default_factory=dict)

    def retry_after(self, client: str, now: float) -> float:
        """0.0 when `client` may try to authenticate, else seconds until it may."""
        if self.limit <= 0:
            return 0.0
        fails = self._fails.get(client)
        if fails is None or len(fails) < self.limit:
            return 0.0
        wait = fails[0] + self.window_s - now
        return wait if wait > 0 else 0.0

    def failed(self, client: str, now: float) -> int:
        """Record a failed authentication; the client's failures within the window."""
        if self.limit <= 0:
            return 0
        fails = self._fails.pop(client, None) or deque(maxlen=self.limit)
        fails.append(now)
        while fails and fails[0] <= now - self.window_s:
            fails.popleft()
        self._fails[client] = fails  # re-inserted: dict order = least recently failing first
        if len(self._fails) > self.max_clients:
            del self._fails[next(iter(self._fails))]
        return len(fails)
