"""`python -m jpu_services.intake`: the intake process (SIGTERM → drain → exit 0)."""

import asyncio
import contextlib

from jpu.runtime.service import serve_workers

if __name__ == "__main__":
    # Every submit passes through this loop (a NATS request, appends, the fold); on asyncio a
    # quarter of intake's time under a burst of submits was socket writes: uvloop is cheaper.
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    serve_workers("intake", "jpu_services.intake")
