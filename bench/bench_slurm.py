"""The Slurm backend on a real private test cluster (scripts/slurm-testcluster, started here into
a private directory and stopped at the end), against raw Slurm in the same run.

    python bench/bench_slurm.py [--jobs 100] [--inflight 4] [--preempt-rounds 5] [--watch-s 15]
    python bench/bench_slurm.py --watch-jobs 1000 [--watch-s 60] [--before-tree DIR]
    python bench/bench_slurm.py --burst 200   (bench_slurm_burst.py: a start burst)

1. dispatch → RUNNING: `preempt_backfill` (none to end) + `SlurmBackend.submit` of a 1-GPU
   `true` job (partition, node, gres, mapped account, output dir: everything the agent does)
   until `poll` sees it started (RUNNING or already past it); median/p99 over --jobs, at most
   --inflight at once (the 4 rtx4090 GPUs).
   Reference (r): `sbatch --wrap true` with the same partition/node/gres, until `squeue --json`
   shows it started, polled every 20 ms.
2. backfill preemption (SPEC B2): both GPUs of a node hold LLM backfill (the stub, `llm`
   partition); a research job onto one of them, submit → RUNNING: (a) the agent's way,
   `preempt_backfill` (scancel, wait until released) then submit; (b) submit only and let
   Slurm's partition_prio preemption act.
3. agent CPU while watching N running jobs (1 GPU each: every GPU of the cluster): the agent's
   poll schedule (watchlist backoff 0.25 s ×1.5 up to 5 s, inventory every 30 s) over --watch-s;
   CPU seconds per minute of watching, of this process + its children (squeue, sinfo), and of
   slurmctld. Reference: the same schedule with no jobs.
--watch-jobs N: only 3, at scale, on its own cluster of ⌈N/250⌉ nodes × 250 fake GPUs (declared
   256 CPUs, 300 GB each): N one-GPU `sleep` jobs (--cpus-per-task=1 --mem=1G) submitted through
   `SlurmBackend.submit` (timed), then, after a warm-up past the backoff ramp, --watch-s of the
   agent's schedule (jpu_services.slurm_agent.watchlist; the polls of a round concurrent, as in
   watch_loop; jobs tracked one by one as they would start) with: the lean listing and aligned
   rounds (the agent now), each half alone, and with --before-tree DIR the code of DIR (a
   PYTHONPATH holding an older `jpu` and `jpu_services`, e.g. from `git archive`) in a child
   process on the same cluster and jobs; plus one refresh of each listing (bytes, squeue wall
   time, parse time).
Progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from jpu.backends import LaunchSpec
from jpu.backends.backfill_contract import BackfillSpec
from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings
from jpu.testing.slurm_fixtures import free_base_port

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_slurm_burst import run_burst
from bench_slurm_watch import run_watch

STUB = "python -m jpu.tools.backfill_stub"
ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "slurm-testcluster"
RTX = ["gpu-4090x2-01", "gpu-4090x2-02"]
ALL = [*RTX, "gpu-3080tix2-01"]
TIER = {"gpu-4090x2-01": "rtx4090", "gpu-4090x2-02": "rtx4090", "gpu-3080tix2-01": "rtx3080ti"}
PER_NODE = 250  # fake GPUs per node of the --watch-jobs cluster


def progress(msg: str) -> None:
    print(f"[bench_slurm] {msg}", file=sys.stderr, flush=True)


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def fmt(xs: list[float]) -> str:
    med, p99 = statistics.median(xs) * 1e3, pct(xs, 0.99) * 1e3
    return f"median {med:.0f} ms, p99 {p99:.0f} ms (n={len(xs)})"


@contextmanager
def cluster(nodes: list[str] | None = None) -> Iterator[Path]:
    """The test cluster; `nodes`: the scaled one of --watch-jobs (250 GPUs each)."""
    directory = Path(tempfile.mkdtemp(prefix="jpu-slurm-bench-", dir="/var/tmp"))
    directory.chmod(0o755)
    count = len(nodes) if nodes else 3
    port = free_base_port(count + 2)
    env = {**os.environ, "JPU_SLURM_DIR": str(directory), "JPU_SLURM_PORT": str(port)}
    if nodes:
        env |= {
            "JPU_SLURM_NODES": " ".join(f"{n}:rtx4090:{PER_NODE}" for n in nodes),
            "JPU_SLURM_NODE_CPUS": str(PER_NODE + 6), "JPU_SLURM_NODE_MEM_MB": "300000",
        }  # fmt: skip

    def script(cmd: str, timeout: float) -> None:
        quiet = subprocess.DEVNULL if cmd == "install" else None  # `sbatch --version` w/o conf
        subprocess.run(["bash", str(SCRIPT), cmd], env=env, check=True, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=quiet)  # fmt: skip

    try:
        script("install", 600)
        script("start", 120)
        progress(f"cluster up in {directory}")
        yield directory
    finally:
        script("stop", 60)
        shutil.rmtree(directory, ignore_errors=True)
        progress("cluster stopped")


class Bench:
    def __init__(self, directory: Path, args: argparse.Namespace) -> None:
        self.conf = str(directory / "slurm.conf")
        self.directory, self.args = directory, args
        self.root = Path(tempfile.mkdtemp(prefix="jpu-slurm-bench-data-", dir="/tmp"))
        self.root.chmod(0o711)
        self.backend = SlurmBackend(SlurmSettings(data_dir=self.root / "data", conf=self.conf))
        self.n = 0

    def spec(self, command: str, node: str) -> LaunchSpec:
        self.n += 1
        job = f"b{self.n}x{time.monotonic_ns()}"
        cpus, mem = (8, 32) if TIER[node] == "rtx4090" else (6, 24)
        return LaunchSpec(
            job_id=job, attempt=1, user="alice", node=node, tier=TIER[node], gpus=[0],
            num_gpus=1, command=command, cpus=cpus, mem_gb=mem, partition=TIER[node],
            output_dir=str(self.root / "out" / job / "1"),
        )  # fmt: skip

    async def started(self, bid: str, deadline_s: float = 30.0) -> float:
        end = time.monotonic() + deadline_s
        while time.monotonic() < end:
            if (await self.backend.poll(bid)).state != "PENDING":
                return time.monotonic()
            await asyncio.sleep(0.02)
        raise RuntimeError(f"{bid} never started")

    async def ended(self, bid: str) -> None:
        while not (await self.backend.poll(bid)).terminal:
            await asyncio.sleep(0.05)

    # 1. dispatch → RUNNING ------------------------------------------------------------------
    async def dispatch(self) -> list[float]:
        """--inflight workers, each: submit, wait started, wait ended (frees its GPU), again."""
        lat: list[float] = []
        todo = iter(range(self.args.jobs))

        async def worker(w: int) -> None:
            for i in todo:
                spec = self.spec("true", RTX[w % 2])
                t0 = time.monotonic()  # what the agent does: preempt (nothing here), submit
                await self.backend.preempt_backfill(spec.node, spec.tier, spec.gpus, 5.0)
                bid = await self.backend.submit(spec)
                lat.append(await self.started(bid) - t0)
                await self.ended(bid)
                if (i + 1) % 25 == 0:
                    progress(f"backend: {i + 1}/{self.args.jobs}")

        await asyncio.gather(*(worker(w) for w in range(self.args.inflight)))
        return lat

    async def squeue_states(self) -> dict[str, str]:
        _, out, _ = await self.backend.cli.run(["squeue", "--json"])
        return {str(j["job_id"]): j["job_state"] for j in json.loads(out)["jobs"]}

    async def raw(self) -> list[float]:
        """The same workers with the bare CLI: sbatch --wrap true, squeue every 20 ms."""
        lat: list[float] = []
        todo = iter(range(self.args.jobs))

        async def worker(w: int) -> None:
            for i in todo:
                t0 = time.monotonic()
                argv = [
                    "sbatch", "--parsable", "--job-name=raw", "--partition=rtx4090",
                    f"--nodelist={RTX[w % 2]}", "--gres=gpu:rtx4090:1", "--cpus-per-task=8",
                    "--mem=32G", f"--output={self.root}/raw-%j.out", "--wrap", "true",
                ]  # fmt: skip
                _, out, _ = await self.backend.cli.run(argv)
                jid = out.strip().split(";")[0]
                while (await self.squeue_states()).get(jid, "PENDING") == "PENDING":
                    await asyncio.sleep(0.02)
                lat.append(time.monotonic() - t0)
                while (await self.squeue_states()).get(jid) in ("RUNNING", "COMPLETING"):
                    await asyncio.sleep(0.05)
                if (i + 1) % 25 == 0:
                    progress(f"raw: {i + 1}/{self.args.jobs}")

        await asyncio.gather(*(worker(w) for w in range(self.args.inflight)))
        return lat

    # 2. backfill preemption -----------------------------------------------------------------
    async def preemption(self, agent_way: bool) -> list[float]:
        lat = []
        node = "gpu-4090x2-02"
        for r in range(self.args.preempt_rounds):
            for g in (0, 1):
                bf = f"bench{r}g{g}{agent_way}{time.monotonic_ns()}"
                spec = BackfillSpec(backfill_id=bf, node=node, tier="rtx4090", gpu=g, command=STUB)
                h = await self.backend.submit_backfill(spec)
                assert h.endpoint, "backfill did not start"
            t0 = time.monotonic()
            if agent_way:
                await self.backend.preempt_backfill(node, "rtx4090", [0], 5.0)
            bid = await self.backend.submit(self.spec("sleep 0.5", node))
            lat.append(await self.started(bid) - t0)
            await self.ended(bid)
            await self.clear_backfill()
        return lat

    async def clear_backfill(self) -> None:
        for bid in await self.backend.running_backfill():
            await self.backend.cancel_backfill(bid, 0.0)
        while await self.backend.running_backfill():
            await asyncio.sleep(0.1)

    # 3. agent CPU while watching ------------------------------------------------------------
    def ctld_cpu(self) -> float:
        pid = (self.directory / "run" / "slurmctld.pid").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def watch(self, bids: list[str]) -> tuple[float, float]:
        """The agent's schedule: per job 0.25 s ×1.5 up to 5 s; inventory every 30 s."""
        interval = dict.fromkeys(bids, 0.25)
        due = {b: time.monotonic() + 0.25 for b in bids}
        inv_due = time.monotonic()
        ru0 = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        c0, t0 = self.ctld_cpu(), time.monotonic()
        while time.monotonic() - t0 < self.args.watch_s:
            now = time.monotonic()
            if now >= inv_due:
                await self.backend.inventory()
                inv_due = now + 30.0
            for b in [b for b, d in due.items() if d <= now]:
                await self.backend.poll(b)
                interval[b] = min(interval[b] * 1.5, 5.0)
                due[b] = time.monotonic() + interval[b]
            nxt = min([inv_due, *due.values()])
            await asyncio.sleep(max(0.0, min(nxt, t0 + self.args.watch_s) - time.monotonic()))
        ru1 = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        cpu = sum(
            b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(ru0, ru1, strict=True)
        )
        per_min = 60.0 / (time.monotonic() - t0)
        return cpu * per_min, (self.ctld_cpu() - c0) * per_min

    async def watching(self) -> tuple[int, tuple[float, float], tuple[float, float]]:
        idle = await self.watch([])
        bids = [await self.backend.submit(self.spec("sleep 300", n)) for n in ALL for _ in (0, 1)]
        for b in bids:
            await self.started(b)
        progress(f"watching {len(bids)} running jobs for {self.args.watch_s:.0f} s")
        busy = await self.watch(bids)
        for b in bids:
            await self.backend.cancel(b, 0.0)
        for b in bids:
            await self.ended(b)
        return len(bids), busy, idle


async def run(args: argparse.Namespace, directory: Path) -> None:
    b = Bench(directory, args)
    try:
        progress("1. dispatch → RUNNING through SlurmBackend")
        backend = await b.dispatch()
        progress("1r. raw sbatch --wrap true → squeue RUNNING")
        raw = await b.raw()
        print(f"dispatch→RUNNING preempt+submit→poll:    {fmt(backend)}")
        print(f"(r) sbatch --wrap true → squeue started:    {fmt(raw)}")
        ratio = statistics.median(backend) / statistics.median(raw)
        print(f"ratio backend/raw (median): {ratio:.2f}x")
        progress("2. backfill preemption")
        agent = await b.preemption(agent_way=True)
        prio = await b.preemption(agent_way=False)
        print(
            f"B2 research submit→RUNNING over llm backfill, preempt_backfill+submit: {fmt(agent)}"
        )
        print(f"B2 research submit→RUNNING over llm backfill, partition_prio only:   {fmt(prio)}")
        progress("3. agent CPU while watching")
        n, (own, ctld), (own0, ctld0) = await b.watching()
        print(f"agent watching {n} running jobs: {own:.2f} CPU s/min (agent+squeue), "
              f"slurmctld {ctld:.2f} CPU s/min")  # fmt: skip
        print(f"(r) same schedule, 0 jobs: {own0:.2f} CPU s/min (agent+sinfo), "
              f"slurmctld {ctld0:.2f} CPU s/min")  # fmt: skip
    finally:
        await b.clear_backfill()
        await b.backend.close()
        shutil.rmtree(b.root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--inflight", type=int, default=4)
    parser.add_argument("--preempt-rounds", type=int, default=5)
    parser.add_argument("--watch-s", type=float, default=15.0)
    parser.add_argument("--watch-jobs", type=int, default=0, help="only 3, at this scale")
    parser.add_argument("--burst", type=int, default=0, help="only a start burst of this many")
    parser.add_argument(
        "--before-tree", default="", help="with --watch-jobs: PYTHONPATH of older code to compare"
    )
    args = parser.parse_args()
    if os.getuid() != 0:
        print("bench_slurm needs root (the test cluster runs munged, slurmd)", file=sys.stderr)
        return 2
    if args.burst:  # issue 30.5: every GPU starting at once, on the scaled cluster
        nodes = [f"w{i + 1:02d}" for i in range(-(-args.burst // PER_NODE))]
        with cluster(nodes) as directory:
            asyncio.run(run_burst(args, directory, nodes))
        return 0
    if args.watch_jobs:
        nodes = [f"w{i + 1:02d}" for i in range(-(-args.watch_jobs // PER_NODE))]
        with cluster(nodes) as directory:
            asyncio.run(run_watch(args, directory, nodes))
        return 0
    with cluster() as directory:
        asyncio.run(run(args, directory))
    return 0


if __name__ == "__main__":
    sys.exit(main())
