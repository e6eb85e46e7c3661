"""`python -m jpu_services.intake`: the intake process (SIGTERM → drain → exit 0)."""

from __future__ import annotations

import asyncio

from jpu.service import run_service, run_workers
from jpu_services.intake import bootstrap, config


async def main(stop: asyncio.Event) -> None:
    settings = config.load()
    edges = await bootstrap.bootstrap(settings, stop)
    try:
        await run_workers(stop, bootstrap.workers(edges))
    finally:
        await edges.close()


if __name__ == "__main__":
    run_service("intake", main)
