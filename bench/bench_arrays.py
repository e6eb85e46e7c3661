"""Job arrays (SPEC Q7): one submit of N tasks → every task visible in `GET /v1/jobs`.

    python bench/bench_arrays.py [--tasks 1000 10000] [--rounds 3]

The stack as `make run` builds it (embedded NATS JetStream + durable PostgreSQL), with the
gateway and intake only: what makes an array visible is intake appending its one event and the
jobs projection writing one row per task (read-your-writes: the 201 is sent once the rows are
there). Per array: the POST's latency, then the time until `GET /v1/jobs` (paged, 500 a page)
lists every task. Reference in the same run: the median latency of a single-job POST.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx
from stackbench import BenchStack, progress

SERVICES = ("gateway", "intake")
HEADERS = {"Authorization": "Bearer demo-bcg-alice"}


async def listed(http: httpx.AsyncClient, array_id: str) -> int:
    """How many tasks of `array_id` `GET /v1/jobs` lists (every page)."""
    n, cursor = 0, None
    while True:
        params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = (await http.get("/v1/jobs", params=params)).json()
        n += sum(1 for j in page["jobs"] if j.get("array_id") == array_id)
        cursor = page.get("next_cursor")
        if cursor is None:
            return n


async def one_array(http: httpx.AsyncClient, tasks: int) -> tuple[float, float]:
    body = {"name": "sweep", "command": "true", "num_gpus": 1, "array": f"0-{tasks - 1}%8"}
    t0 = time.perf_counter()
    r = await http.post("/v1/jobs", json=body)
    posted = time.perf_counter() - t0
    assert r.status_code == 201, r.text
    array_id = r.json()["id"]
    if "tasks" not in r.json():
        progress(f"the 201 came before the rows (projection lag): {r.json()}")
    while await listed(http, array_id) < tasks:
        await asyncio.sleep(0.01)
    return posted, time.perf_counter() - t0


async def main(args: argparse.Namespace) -> None:
    overrides = {
        "JPU_SUBMIT_RATE_PER_S": "0",
        "JPU_ARRAY_MAX_TASKS": str(max(args.tasks)),
        "JPU_ARRAY_MAX_QUEUED_PER_USER": str(10 * sum(args.tasks) * args.rounds),
        "JPU_BACKFILL_ENABLED": "false",
    }
    async with (
        BenchStack(SERVICES, overrides) as stack,
        httpx.AsyncClient(base_url=stack.url, headers=HEADERS, timeout=60) as http,
    ):
        singles = []
        for _ in range(20):  # the reference: one single job, the same path
            t0 = time.perf_counter()
            r = await http.post("/v1/jobs", json={"command": "true", "num_gpus": 1})
            assert r.status_code == 201, r.text
            singles.append(time.perf_counter() - t0)
        ref = statistics.median(singles)
        print(f"(r) single-job POST, median of 20: {ref * 1000:.1f} ms")
        for tasks in args.tasks:
            for i in range(args.rounds):
                posted, visible = await one_array(http, tasks)
                progress(f"{tasks} tasks round {i + 1}")
                print(
                    f"array of {tasks:,} tasks: POST {posted * 1000:.0f} ms, all listed in "
                    f"GET /v1/jobs after {visible * 1000:.0f} ms ({posted / ref:.1f}× a "
                    "single-job POST)"
                )


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, nargs="+", default=[1000, 10000])
    p.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(p.parse_args()))
