"""Gateway submit throughput and latency against a trivial FastAPI endpoint, in the same run.

    python bench/bench_gateway.py [--clients 32] [--requests 3000] [--seconds 30]

The stack as `make run` builds it (embedded NATS JetStream + durable PostgreSQL, prepare, services
under the stack's supervisor), with only the services a submit touches: the gateway (uvicorn; as
the stack runs it, JPU_GATEWAY_WORKERS processes on one port, default 2, the first with the
jobs/maintenance/gpu_resources/backfill projector) and intake. No dispatcher and
no agent: the submitted jobs stay queued, so the queue grows during the run as it does under a
burst of submissions. Rate limit off (JPU_SUBMIT_RATE_PER_S=0), max_active_jobs high, so every
submit is also promoted at once (JobSubmitted + JobPromoted per request).

Closed loop on loopback, `--clients` keep-alive connections. Figures, with ratios to (a):
(a) a bare FastAPI app under uvicorn: GET /healthz (the reference),
(b) the gateway's GET /healthz, (c) GET /v1/me (bearer auth = one PostgreSQL query),
(d) POST /v1/jobs: auth → intake over NATS request/reply (validate, append JobSubmitted, promote)
    → the job as intake's fold holds it (the user's next GET waits for the projection).
Under each line, the CPU each part of the stack used per request (from /proc; the bare app is
`other`). Progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time

from stackbench import (
    DEMO_TOKENS,
    BenchStack,
    LoadResult,
    RawClient,
    closed_loop,
    cpu_use,
    profiling,
    progress,
)

from jpu.embedded.nats import free_port

BARE_APP = """
import uvicorn
from fastapi import FastAPI
app = FastAPI()
@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
uvicorn.run(app, host="127.0.0.1", port=%d, log_config=None, access_log=False)
"""

SUBMIT_BODY = json.dumps({"name": "bench", "command": "true", "num_gpus": 1}).encode()
OVERRIDES = {
    "JPU_SUBMIT_RATE_PER_S": "0",
    "JPU_MAX_ACTIVE_JOBS": "1000000",  # the demo users have no own limit: this default applies
    "JPU_BACKFILL_ENABLED": "false",
}


def auth(i: int) -> dict[str, str]:
    return {"Authorization": f"Bearer {DEMO_TOKENS[i % len(DEMO_TOKENS)]}"}


async def get_healthz(c: RawClient, i: int) -> tuple[int, bytes]:
    return await c.request("GET", "/healthz")


async def get_me(c: RawClient, i: int) -> tuple[int, bytes]:
    return await c.request("GET", "/v1/me", headers=auth(i))


async def post_job(c: RawClient, i: int) -> tuple[int, bytes]:
    return await c.request("POST", "/v1/jobs", SUBMIT_BODY, auth(i))


async def wait_port(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


async def tokens_accepted(port: int, timeout_s: float = 60.0) -> None:
    """Wait until the gateway's projector has folded the demo users (prepare appends them as
    events, and /readyz does not wait for the identities projection): a submit before that is a
    401, and 20 of them throttle the bench's address (SEC5) for the whole run. One try per
    second stays under that limit."""
    deadline = time.monotonic() + timeout_s
    c = RawClient("127.0.0.1", port)
    try:
        for i in range(len(DEMO_TOKENS)):
            while (await get_me(c, i))[0] != 200:
                if time.monotonic() > deadline:
                    raise RuntimeError("the demo tokens are still refused")
                await asyncio.sleep(1.0)
    finally:
        await c.close()


async def bare_reference(args: argparse.Namespace) -> LoadResult:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", BARE_APP % port])
    try:
        await wait_port(port)
        await closed_loop(port, get_healthz, clients=args.clients, max_requests=500, max_seconds=5)
        progress("(a) bare FastAPI GET /healthz ...")
        return await run(port, get_healthz, args, "bare", {"bare": proc.pid})
    finally:
        proc.terminate()
        proc.wait(10)


async def run(
    port: int, req: object, args: argparse.Namespace, label: str, pids: dict[str, int] | None = None
) -> LoadResult:
    cpu: dict[str, float] = {}
    with profiling(args.profile if pids else None, pids or {}, args.seconds, label), cpu_use(cpu):
        result = await closed_loop(
            port,
            req,  # type: ignore[arg-type]
            clients=args.clients,
            max_requests=args.requests,
            max_seconds=args.seconds,
            label=label,
        )
    result.cpu_s = cpu
    return result


async def main(args: argparse.Namespace) -> int:
    results: list[tuple[str, LoadResult]] = []
    if not args.only_submit:
        results.append(("(a) bare FastAPI GET /healthz", await bare_reference(args)))
    progress("starting the stack (NATS, PostgreSQL, gateway, intake) ...")
    async with BenchStack(("gateway", "intake"), OVERRIDES) as stack:
        progress(f"gateway {stack.url}; pids {stack.pids()}; warm-up ...")
        await tokens_accepted(stack.port)
        await closed_loop(
            stack.port, post_job, clients=args.clients, max_requests=300, max_seconds=20
        )
        if not args.only_submit:
            progress("(b) gateway GET /healthz ...")
            results.append(
                (
                    "(b) gateway GET /healthz",
                    await run(stack.port, get_healthz, args, "healthz", stack.pids()),
                )
            )
            progress("(c) gateway GET /v1/me ...")
            results.append(
                (
                    "(c) gateway GET /v1/me (auth)",
                    await run(stack.port, get_me, args, "me", stack.pids()),
                )
            )
        progress("(d) gateway POST /v1/jobs ...")
        submit = await run(stack.port, post_job, args, "submit", stack.pids())
        results.append(("(d) gateway POST /v1/jobs", submit))
    print(f"clients={args.clients} requests<={args.requests} seconds<={args.seconds:g}")
    ref = results[0][1]
    for label, r in results:
        print(r.line(label, None if r is ref else ref))
        if r.cpu_line():
            print(r.cpu_line())
    return 0 if submit.ok and not submit.errors else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--requests", type=int, default=3000, help="per measurement")
    ap.add_argument("--seconds", type=float, default=30.0, help="per measurement, at most")
    ap.add_argument("--profile", metavar="PY_SPY", help="py-spy binary: profile the services")
    ap.add_argument("--only-submit", action="store_true", help="skip (a)-(c)")
    sys.exit(asyncio.run(main(ap.parse_args())))
