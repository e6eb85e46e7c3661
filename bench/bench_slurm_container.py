"""Dispatch → RUNNING on the Slurm test cluster, in a podman container vs the user's account and
a network namespace (SPEC X4a; docs/isolation.md "On Slurm"). Needs root, podman
(scripts/install-podman) and Debian's Slurm; starts its own private cluster and stops it.

    python bench/bench_slurm_container.py [--jobs 30]

For each isolation, --jobs one-GPU jobs one after another through `SlurmBackend.submit`, each
`date +%s.%N > "$JOB_OUTPUT_DIR/started"`:
  running  from the submit call until `poll` sees the job started (RUNNING or past it; polled
           every 20 ms): what the agent records as JobStarted;
  inside   from the submit call until the job's first command ran (its own clock, inside the
           container: the batch script, sudo, the node's helper, podman, runc).
median / p99 / max in ms. One warm-up job per isolation (accounts, image layers), not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jpu.backends import LaunchSpec
from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_slurm import SCRIPT, cluster, progress


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def measure(conf: str, isolation: str, jobs: int) -> dict[str, list[float]]:
    data = Path(tempfile.mkdtemp(prefix="jpu-bench-sc-data-", dir="/tmp"))
    out_root = Path(tempfile.mkdtemp(prefix="jpu-bench-sc-out-", dir="/tmp"))
    for d in (data, out_root):
        d.chmod(0o711)  # the job's account reaches its output dir
    backend = SlurmBackend(SlurmSettings(data, conf, isolation=isolation))
    times: dict[str, list[float]] = {"running": [], "inside": []}
    try:
        for i in range(jobs + 1):
            job_id = f"bsc{i}x{time.monotonic_ns()}"
            spec = LaunchSpec(
                job_id=job_id, attempt=1, user="alice", node="gpu-4090x2-01", tier="rtx4090",
                gpus=[0], num_gpus=1, command='date +%s.%N > "$JOB_OUTPUT_DIR/started"\n',
                cpus=8, mem_gb=32, partition="rtx4090", output_dir=str(out_root / job_id / "1"),
            )  # fmt: skip
            t0 = time.time()
            bid = await backend.submit(spec)
            while (await backend.poll(bid)).state == "PENDING":
                await asyncio.sleep(0.02)
            t1 = time.time()
            while not (status := await backend.poll(bid)).terminal:
                await asyncio.sleep(0.05)
            out = Path(spec.output_dir)
            assert status.state == "COMPLETED", (out / "stderr").read_text()
            inside = float((out / "started").read_text())
            if i:  # the first one warms up
                times["running"].append((t1 - t0) * 1000)
                times["inside"].append((inside - t0) * 1000)
    finally:
        await backend.close()
        subprocess.run(["rm", "-rf", str(data), str(out_root)], check=False)
    return times


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=30)
    args = parser.parse_args()
    with cluster() as directory:
        subprocess.run(["bash", str(SCRIPT), "podman-helper", sys.executable], check=True,
                       stdout=subprocess.DEVNULL, timeout=600)  # fmt: skip
        print(f"{'isolation':<12} {'step':<8} {'median':>8} {'p99':>8} {'max':>8}  "
              f"(ms, n={args.jobs}, Slurm test cluster)")  # fmt: skip
        for isolation in ("uid-netns", "container"):
            progress(f"{isolation}: {args.jobs} jobs")
            times = await measure(str(directory / "slurm.conf"), isolation, args.jobs)
            for step, values in times.items():
                print(
                    f"{isolation:<12} {step:<8} {statistics.median(values):8.1f} "
                    f"{_p(values, 0.99):8.1f} {max(values):8.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    asyncio.run(main())
