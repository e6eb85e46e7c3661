"""Dispatch → RUNNING on the local backend, in a podman container vs the user's account and a
network namespace (SPEC X4a; docs/isolation.md). Needs root and `make podman`.

    python bench/bench_container.py [--jobs 30]

For each isolation, --jobs one-GPU jobs one after another, each `date +%s.%N > started`:
  submit  `LocalBackend.submit` (account, output dir, record, spawn) until it returns: the agent
          records RUNNING (JobStarted) right after;
  inside  from the submit call until the job's first command ran (its own clock, inside).
median / p99 / max in ms. The base image and the accounts exist before the first timed job (one
warm-up job per isolation, not counted).
--workspace REQS also builds a workspace from that requirements text (e.g. "six") and prints
its build time and image size against the base image's (needs the package index: --ca-bundle).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time
from pathlib import Path

from jpu.backends.isolation import BASE_IMAGE
from jpu.backends.workspaces import PipSite
from jpu.testing.local_world import LocalWorld
from jpu.testing.waits import wait_end


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(isolation: str, jobs: int) -> dict[str, list[float]]:
    world = LocalWorld("jpu-bench", isolation=isolation)
    backend = world.backend()
    times: dict[str, list[float]] = {"submit": [], "inside": []}
    try:
        for i in range(jobs + 1):
            spec = world.spec('date +%s.%N > "$JOB_OUTPUT_DIR/started"\n')
            t0 = time.time()
            bid = await backend.submit(spec)
            t1 = time.time()
            status = await wait_end(backend, bid, 60)
            assert status.state == "COMPLETED", status
            inside = float((Path(spec.output_dir) / "started").read_text())
            if i:  # the first one warms up (accounts, image layers in the page cache)
                times["submit"].append((t1 - t0) * 1000)
                times["inside"].append((inside - t0) * 1000)
    finally:
        await world.aclose()
    return times


def build_workspace(requirements: str, ca_bundle: str) -> None:
    world = LocalWorld("jpu-bench", isolation="container", pip=PipSite(ca_bundle=ca_bundle))
    spaces = world.backend().workspaces
    t0 = time.monotonic()
    code = spaces.start_build("bench", "bench", requirements.replace(",", "\n") + "\n").wait()
    took = time.monotonic() - t0
    ws = spaces.get("bench", "bench")
    assert code == 0 and ws is not None and ws.state == "READY", spaces.log("bench", "bench")
    base = subprocess.run(
        ["podman", "image", "inspect", "--format", "{{.Size}}", BASE_IMAGE],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    print(f"workspace {requirements!r}: built in {took:.1f} s, image {ws.size / 1e6:.0f} MB "
          f"(base {int(base.stdout) / 1e6:.0f} MB)")  # fmt: skip
    subprocess.run(["podman", "rmi", "--force", ws.image], capture_output=True, check=False)
    asyncio.run(world.aclose())


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("--workspace", default="", help="requirements, comma-separated")
    parser.add_argument("--ca-bundle", default="/etc/ssl/certs/ca-certificates.crt")
    args = parser.parse_args()
    if args.workspace:
        await asyncio.to_thread(build_workspace, args.workspace, args.ca_bundle)
    print(f"{'isolation':<12} {'step':<7} {'median':>8} {'p99':>8} {'max':>8}  (ms, n={args.jobs})")
    for isolation in ("uid-netns", "container"):
        times = await measure(isolation, args.jobs)
        for step, values in times.items():
            print(
                f"{isolation:<12} {step:<7} {statistics.median(values):8.1f} "
                f"{_p(values, 0.99):8.1f} {max(values):8.1f}"
            )


if __name__ == "__main__":
    asyncio.run(main())
