"""`python -m jpu.runtime.health`: the container health check of the one service image (SPEC O4).

The gateway is healthy when its URL answers 200 (JPU_HEALTH_URL, e.g. .../readyz); a worker has no
HTTP port, so it is healthy while its heartbeat file (JPU_HEARTBEAT_FILE, touched every 5 s by
`jpu.runtime.service.run_workers` once connected) is fresh. Exit 0 healthy, 1 not.
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request

STALE_AFTER_S = 30.0  # six missed heartbeats


def healthy(env: dict[str, str], now: float) -> tuple[bool, str]:
    url = env.get("JPU_HEALTH_URL")
    if url:
        try:
            with urllib.request.urlopen(url, timeout=3) as r:
                return r.status == 200, f"{url}: {r.status}"
        except OSError as e:
            return False, f"{url}: {e}"
    path = env.get("JPU_HEARTBEAT_FILE")
    if not path:
        return False, "neither JPU_HEALTH_URL nor JPU_HEARTBEAT_FILE is set"
    try:
        age = now - os.stat(path).st_mtime
    except OSError as e:
        return False, f"{path}: {e.strerror}"
    return age < STALE_AFTER_S, f"{path}: touched {age:.0f} s ago"


def main() -> int:
    ok, why = healthy(dict(os.environ), time.time())
    print(why)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
