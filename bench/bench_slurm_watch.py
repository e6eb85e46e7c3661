"""bench_slurm.py --watch-jobs N: the agent watching N running jobs on a scaled real cluster.

Run through bench_slurm.py (which starts and stops the cluster); see its docstring.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jpu.backends import LaunchSpec
from jpu.backends.slurm.backend import SlurmBackend, SlurmSettings
from jpu.backends.slurm.parse import jobs_from_squeue
from jpu.backends.slurm.submit import NAME_PREFIX
from jpu_services.slurm_agent.options import AgentOptions
from jpu_services.slurm_agent.watchlist import Watched, WatchList

TRACK_S = 10.0  # jobs are tracked one by one over this long, as they start in the agent
WARMUP_S = 25.0  # …and the ramp of the last (0.25 s × 1.5ⁿ reaches 5 s after ~12 s) is over


def progress(msg: str) -> None:
    print(f"[bench_slurm] {msg}", file=sys.stderr, flush=True)


def mem_available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


class WatchBench:
    def __init__(self, directory: Path, root: Path, nodes: list[str], args: argparse.Namespace):
        self.directory, self.root, self.nodes, self.args = directory, root, nodes, args
        self.conf = str(directory / "slurm.conf")
        self.n = 0

    def backend(self, listing: str) -> SlurmBackend:
        settings = SlurmSettings(data_dir=self.root / "data", conf=self.conf, listing=listing)
        return SlurmBackend(settings)

    def spec(self) -> LaunchSpec:
        node = self.nodes[self.n % len(self.nodes)]
        self.n += 1
        job = f"w{self.n}x{time.monotonic_ns()}"
        return LaunchSpec(
            job_id=job, attempt=1, user="alice", node=node, tier="rtx4090", gpus=[0],
            num_gpus=1, command="sleep 3600", cpus=1, mem_gb=1, partition="rtx4090",
            output_dir=str(self.root / "out" / job / "1"),
        )  # fmt: skip

    def ctld_cpu(self) -> float:
        pid = (self.directory / "run" / "slurmctld.pid").read_text().strip()
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    async def submit_all(self, backend: SlurmBackend) -> tuple[list[str], list[float], float]:
        lat, bids, t0 = [], [], time.monotonic()
        for i in range(self.args.watch_jobs):
            t = time.monotonic()
            bids.append(await backend.submit(self.spec()))
            lat.append(time.monotonic() - t)
            if (i + 1) % 100 == 0:
                progress(f"submitted {i + 1}/{self.args.watch_jobs}")
        return bids, lat, time.monotonic() - t0

    async def all_running(self, backend: SlurmBackend, bids: list[str]) -> float:
        t0, want = time.monotonic(), {int(b) for b in bids}
        while True:
            jobs = await backend.snapshot(0.0)
            running = sum(1 for j in want if j in jobs and jobs[j].state == "RUNNING")
            if running == len(want):
                return time.monotonic() - t0
            if time.monotonic() - t0 > 600:
                raise RuntimeError(f"only {running}/{len(want)} jobs running after 600 s")
            await asyncio.sleep(1.0)

    async def watch(
        self, backend: SlurmBackend, bids: list[str], align: bool | None
    ) -> dict[str, float]:
        """The agent's watch loop over `bids` (WatchList + concurrent polls of a round +
        inventory every 30 s); CPU per minute over --watch-s after WARMUP_S. The jobs are
        tracked one by one over TRACK_S (the agent tracks each as it starts), not at once.
        align None: the WatchList as it is (the HEAD code of --head-child has no `align`)."""
        opts = AgentOptions()
        kw = {} if align is None else {"align": align}
        watch = WatchList(opts.poll_min_s, opts.poll_max_s, **kw)
        start = time.monotonic()
        untracked = [(start + TRACK_S * i / max(len(bids), 1), b) for i, b in enumerate(bids)]
        count = {"rounds": 0, "polls": 0, "refreshes": 0}
        _count_refreshes(backend, count)

        async def check(w: Watched) -> None:
            status = await backend.poll(w.backend_job_id)
            assert status.state == "RUNNING", status
            watch.backoff(w)
            count["polls"] += 1

        async def loop() -> None:
            inv_due = time.monotonic()
            while True:
                if time.monotonic() >= inv_due:
                    await backend.inventory()
                    inv_due = time.monotonic() + opts.inventory_every_s
                while untracked and untracked[0][0] <= time.monotonic():
                    watch.track(untracked[0][1], 1, untracked[0][1])
                    untracked.pop(0)
                due = watch.due()
                if due:
                    count["rounds"] += 1
                    await asyncio.gather(*(check(w) for w in due))
                nxt = untracked[0][0] - time.monotonic() if untracked else watch.sleep_s()
                await asyncio.sleep(max(min(watch.sleep_s(), nxt), 0.0))

        task = asyncio.create_task(loop())  # runs on across both windows, like the agent
        await asyncio.sleep(WARMUP_S)
        count.update(rounds=0, polls=0, refreshes=0)
        who = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        ru0 = [resource.getrusage(w) for w in who]
        c0, t0 = self.ctld_cpu(), time.monotonic()
        await asyncio.sleep(self.args.watch_s)
        ru1 = [resource.getrusage(w) for w in who]
        c1, per_min = self.ctld_cpu(), 60.0 / (time.monotonic() - t0)
        result = {k: v * per_min for k, v in count.items()}
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        cpu = sum(
            b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(ru0, ru1, strict=True)
        )
        return {**result, "agent": cpu * per_min, "ctld": (c1 - c0) * per_min}

    async def refresh_cost(self, backend: SlurmBackend) -> list[str]:
        """One refresh of each listing, 5 times: bytes, squeue wall time, parse time."""
        from jpu.backends.slurm.parse import SQUEUE_FORMAT  # not in the HEAD code

        out = []
        json_argv = ["squeue", "--json"]
        lean_argv = ["squeue", "--noheader", "--states=all", "--Format=" + SQUEUE_FORMAT]
        for label, argv, env, parse in (
            ("squeue --json", json_argv, None, _parse_json),
            ("lean squeue --Format", lean_argv, {**backend.cli.env, "SLURM_TIME_FORMAT": "%s"},
             _parse_lean),
        ):  # fmt: skip
            walls, parses, size = [], [], 0
            for _ in range(5):
                t = time.monotonic()
                _, text, _ = await backend.cli.run(argv, env=env)
                walls.append(time.monotonic() - t)
                t = time.monotonic()
                parse(text)
                parses.append(time.monotonic() - t)
                size = len(text.encode())
            out.append(
                f"{label}: {size / 1e3:,.0f} kB, squeue {statistics.median(walls) * 1e3:.0f} ms "
                f"wall, parse {statistics.median(parses) * 1e3:.1f} ms (median of 5)"
            )
        return out

    async def cancel_all(self, backend: SlurmBackend, bids: list[str]) -> None:
        for i in range(0, len(bids), 200):
            await backend.cli.run(["scancel", *bids[i : i + 200]], check=False)
        while True:
            jobs = await backend.snapshot(0.0)
            if all(jobs[int(b)].terminal for b in bids if int(b) in jobs):
                return
            await asyncio.sleep(1.0)


def _count_refreshes(backend: SlurmBackend, count: dict[str, int]) -> None:
    """Count the squeue listings the backend runs into `count` (instrumentation: wraps the
    calls of its CLI, the same way for the HEAD code and this one)."""
    cli = backend.cli
    cli.bench_count = count  # type: ignore[attr-defined]
    for name in ("squeue", "squeue_states"):
        inner = getattr(cli, name, None)
        if inner is None or hasattr(inner, "counted"):
            continue

        async def counted(*a: object, _inner: Any = inner, **kw: object) -> Any:
            cli.bench_count["refreshes"] += 1  # type: ignore[attr-defined]
            return await _inner(*a, **kw)

        counted.counted = True  # type: ignore[attr-defined]
        setattr(cli, name, counted)


def _parse_json(text: str) -> None:
    jobs_from_squeue(json.loads(text), NAME_PREFIX)


def _parse_lean(text: str) -> None:
    from jpu.backends.slurm.parse import states_from_squeue  # not in the HEAD code

    states_from_squeue(text)


def report(label: str, r: dict[str, float], n: int) -> None:
    print(f"watching {n} running jobs, {label}: agent+children {r['agent']:.2f} CPU s/min, "
          f"slurmctld {r['ctld']:.2f} CPU s/min; {r['rounds']:.0f} rounds, {r['polls']:.0f} "
          f"polls, {r['refreshes']:.0f} squeue listings per min")  # fmt: skip


async def head_child(b: WatchBench, bids: list[str]) -> dict[str, float]:
    """The same watch, by the backend and watch list of --before-tree, in a child process."""
    bids_file = b.root / "bids.txt"
    bids_file.write_text("\n".join(bids))
    argv = [sys.executable, __file__, "--conf-dir", str(b.directory), "--root", str(b.root),
            "--bids", str(bids_file), "--watch-s", str(b.args.watch_s)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": b.args.before_tree}
    proc = await asyncio.create_subprocess_exec(*argv, env=env, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"the --before-tree child failed ({proc.returncode})")
    return json.loads(out.decode().strip().splitlines()[-1])  # type: ignore[no-any-return]


def child_main() -> None:
    """--before-tree child: watch the given jobs with whatever `jpu` PYTHONPATH supplies."""
    parser = argparse.ArgumentParser()
    for opt in ("--conf-dir", "--root", "--bids"):
        parser.add_argument(opt, required=True)
    parser.add_argument("--watch-s", type=float, required=True)
    args = parser.parse_args()
    import jpu.backends.slurm.backend as slurm_mod

    progress(f"child runs {slurm_mod.__file__}")
    root = Path(args.root)
    b = WatchBench(Path(args.conf_dir), root, [], args)
    backend = SlurmBackend(SlurmSettings(data_dir=root / "data", conf=b.conf))
    bids = Path(args.bids).read_text().split()
    result = asyncio.run(b.watch(backend, bids, align=None))
    print(json.dumps(result))


async def run_watch(args: argparse.Namespace, directory: Path, nodes: list[str]) -> None:
    root = Path(tempfile.mkdtemp(prefix="jpu-slurm-bench-data-", dir="/tmp"))
    root.chmod(0o711)
    b = WatchBench(directory, root, nodes, args)
    lean, old = b.backend("lean"), b.backend("json")
    bids: list[str] = []
    try:
        progress("reference: the schedule with 0 jobs")
        idle = await b.watch(lean, [], align=True)
        mem0 = mem_available_mb()
        progress(f"submitting {args.watch_jobs} jobs through SlurmBackend.submit")
        bids, lat, total = await b.submit_all(lean)
        wait = await b.all_running(lean, bids)
        await asyncio.sleep(5.0)
        mem1 = mem_available_mb()
        p99 = sorted(lat)[int(0.99 * len(lat))]
        print(f"submit {len(bids)} jobs through SlurmBackend.submit: {total:.1f} s "
              f"({len(bids) / total:.1f} jobs/s), per submit median "
              f"{statistics.median(lat) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms; "
              f"all RUNNING {wait:.1f} s after the last submit")  # fmt: skip
        print(f"memory of {len(bids)} running jobs (MemAvailable drop): {mem0 - mem1:,.0f} MB "
              f"= {(mem0 - mem1) / len(bids):.2f} MB per job")  # fmt: skip
        for line in await b.refresh_cost(lean):
            print(f"one refresh with {len(bids)} jobs: {line}")
        if args.before_tree:
            progress(f"watching {len(bids)} jobs: before, the code of {args.before_tree}")
            report("before (the code of --before-tree)", await head_child(b, bids), len(bids))
        for label, backend, align in (
            ("--json listing, aligned rounds", old, True),
            ("lean listing, one round per job", lean, False),
            ("after (lean listing, aligned rounds)", lean, True),
        ):
            progress(f"watching {len(bids)} jobs: {label}")
            report(label, await b.watch(backend, bids, align), len(bids))
        print(f"(r) same schedule, 0 jobs: agent+children {idle['agent']:.2f} CPU s/min, "
              f"slurmctld {idle['ctld']:.2f} CPU s/min")  # fmt: skip
    finally:
        if bids:
            progress("cancelling")
            await b.cancel_all(lean, bids)
        await lean.close()
        await old.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    child_main()
