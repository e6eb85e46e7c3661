"""bench_slurm.py --burst N: N one-GPU starts at once (every GPU after a drain), as the agent
issues them (one `asyncio.gather` of `SlurmBackend.submit`), with `submit_concurrency` 1 (one
`sbatch` at a time, the agent before issue 30) and the default, then every call the agent makes
per start (slurm_agent/agent.py: `find`, `preempt_backfill`, `submit`, then `poll` for the
JobStarted it appends), against raw `sbatch` with the same request and as many in flight, in the
same run. Starts/s = submits answered with a Slurm id (the agent appends JobStarted then); each
round's jobs are cancelled before the next. Load average before each round on stderr.

Run through bench_slurm.py (which starts and stops the cluster); see its docstring.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_slurm_watch import WatchBench

from jpu.backends import BackendError, LaunchSpec
from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings


def progress(msg: str) -> None:
    print(f"[bench_slurm] {msg}", file=sys.stderr, flush=True)


async def _through_backend(b: WatchBench, root: Path, n: int, concurrency: int) -> float:
    settings = SlurmSettings(data_dir=root / "data", conf=b.conf, submit_concurrency=concurrency)
    backend = SlurmBackend(settings)
    try:
        specs = [b.spec() for _ in range(n)]
        t0 = time.monotonic()
        bids = await asyncio.gather(*(backend.submit(s) for s in specs))
        took = time.monotonic() - t0
        assert len(set(bids)) == n, "one Slurm job per attempt"
        await b.cancel_all(backend, list(bids))
        return took
    finally:
        await backend.close()


async def _as_the_agent(b: WatchBench, root: Path, n: int, concurrency: int) -> float:
    """What JobAgent._submit and _started call per start, every start at once."""
    settings = SlurmSettings(data_dir=root / "data", conf=b.conf, submit_concurrency=concurrency)
    backend = SlurmBackend(settings)

    async def start(spec: LaunchSpec) -> str:
        bid = await backend.find(spec.job_id, spec.attempt)
        if bid is None:
            await backend.preempt_backfill(spec.node, spec.tier, spec.gpus, 5.0)
        bid = bid or await backend.submit(spec)
        await backend.poll(bid)  # the isolation JobStarted records
        return bid

    try:
        specs = [b.spec() for _ in range(n)]
        t0 = time.monotonic()
        bids = await asyncio.gather(*(start(s) for s in specs))
        took = time.monotonic() - t0
        assert len(set(bids)) == n, "one Slurm job per attempt"
        await b.cancel_all(backend, list(bids))
        return took
    finally:
        await backend.close()


async def _raw(b: WatchBench, root: Path, n: int, concurrency: int) -> float:
    backend = SlurmBackend(SlurmSettings(data_dir=root / "raw", conf=b.conf))
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> str:
        argv = [
            "sbatch", "--parsable", f"--job-name=raw{i}", "--partition=rtx4090",
            f"--nodelist={b.nodes[i % len(b.nodes)]}", "--gres=gpu:rtx4090:1",
            "--cpus-per-task=1", "--mem=1G", f"--output={root}/raw-%j.out", "--wrap", "sleep 3600",
        ]  # fmt: skip
        async with slots:
            _, out, _ = await backend.cli.run(argv)
        return out.strip().split(";")[0]

    try:
        t0 = time.monotonic()
        bids = await asyncio.gather(*(one(i) for i in range(n)))
        took = time.monotonic() - t0
        await b.cancel_all(backend, list(bids))
        return took
    finally:
        await backend.close()


async def run_burst(args: argparse.Namespace, directory: Path, nodes: list[str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="jpu-slurm-bench-data-", dir="/tmp"))
    root.chmod(0o711)
    b = WatchBench(directory, root, nodes, args)
    n, default = args.burst, SlurmSettings(data_dir=root).submit_concurrency
    try:
        rows = []
        for label, concurrency, how in (
            ("SlurmBackend.submit, one sbatch at a time (before)", 1, _through_backend),
            (f"SlurmBackend.submit, {default} in flight (now)", default, _through_backend),
            (f"the agent's calls per start, {default} in flight", default, _as_the_agent),
            (f"(r) raw sbatch, {default} in flight", default, _raw),
        ):
            progress(f"burst of {n}: {label} (load {os.getloadavg()[0]:.1f})")
            try:
                took = await how(b, root, n, concurrency)
            except BackendError as e:  # e.g. a squeue per start timing out: the row says so
                print(f"burst of {n} one-GPU starts, {label}: failed ({e})", flush=True)
                continue
            rows.append((label, took))
        ref = n / rows[-1][1]
        for label, took in rows:
            rate = n / took
            print(f"burst of {n} one-GPU starts, {label}: {took:.1f} s = {rate:.1f} starts/s "
                  f"({rate / ref:.2f}× raw sbatch)")  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
