"""Random workloads for the simulator's property tests and the tests that replay its logs (the
fold, the snapshot codec, the differential test): a small mixed cluster and a hypothesis
strategy of jobs on it."""

from __future__ import annotations

import io
import random
from typing import Any

import msgspec
from hypothesis import strategies as st

from jpu.bus import Delivered
from jpu.config import Cluster
from jpu.events import decode, subject_for
from jpu.policy.model import CycleResult, QueuedJob, Snapshot
from jpu.sim.params import SimParams
from jpu.sim.run import simulate
from jpu.sim.workload import WorkloadJob
from jpu.testing.fold import as_log

CLUSTER = msgspec.convert(
    {
        "tiers": [
            {"name": "rtx4090", "model": "NVIDIA RTX 4090", "vram_gb": 24, "tflops": 82.6,
             "sort_order": 20, "max_gpus": 4, "partition": "rtx4090"},
            {"name": "rtx3080ti", "model": "NVIDIA RTX 3080 Ti", "vram_gb": 12, "tflops": 34.1,
             "sort_order": 10, "max_gpus": 2, "partition": "rtx3080ti"},
        ],
        "nodes": [
            {"name": "big", "gpus": {"rtx4090": 4}},
            {"name": "mixed", "gpus": {"rtx4090": 2, "rtx3080ti": 2}},  # two placements
            {"name": "small", "gpus": {"rtx3080ti": 2}},
        ],
        "labs": [
            {"name": "A", "usage": 1e5},
            {"name": "C", "users": [{"name": "u4", "max_active_jobs": 1}]},
        ],
    },
    Cluster,
)  # fmt: skip


@st.composite
def workloads(draw: Any) -> list[WorkloadJob]:
    n = draw(st.integers(1, 14))
    jobs = []
    for i in range(n):
        jobs.append(
            WorkloadJob(
                id=f"j{i}",
                lab=draw(st.sampled_from(["A", "B", "C"])),
                user=draw(st.sampled_from(["u1", "u2", "u3", "u4"])),
                submit_s=float(draw(st.integers(0, 600))),
                num_gpus=draw(st.integers(1, 4)),
                duration_s=float(draw(st.integers(0, 900))),
                peak_vram_gb=draw(st.sampled_from([None, None, None, 16.0, 40.0])),
                oom_after_s=float(draw(st.integers(1, 120))),
                cancel_s=draw(st.one_of(st.none(), st.integers(0, 800).map(float))),
            )
        )
    return sorted(jobs, key=lambda j: j.submit_s)


def simulated_log(jobs: list[WorkloadJob], params: SimParams) -> list[Delivered]:
    """The log the simulator writes for `jobs` on CLUSTER, as the bus delivers it."""
    buf = io.BytesIO()
    simulate(CLUSTER, jobs, params, buf)
    return as_log(decode(line) for line in buf.getvalue().splitlines())


# the differential tests' seeded simulations (fold, projections and simulator must agree)
def seeded_workload(seed: int) -> list[WorkloadJob]:
    """The differential tests' workload of a seed: 8-24 jobs of three labs, with OOM retries,
    jobs that never fit and cancels."""
    rng = random.Random(seed)
    out = []
    for i in range(rng.randint(8, 24)):
        out.append(
            WorkloadJob(
                id=f"j{i}",
                lab=rng.choice("ABC"),
                user=rng.choice(["u1", "u2", "u3", "u4"]),
                submit_s=float(rng.randint(0, 600)),
                num_gpus=rng.randint(1, 4),
                duration_s=float(rng.randint(0, 900)),
                peak_vram_gb=rng.choice([None, None, None, 16.0, 40.0]),  # OOM retry / no fit
                oom_after_s=float(rng.randint(1, 120)),
                cancel_s=rng.choice([None, None, float(rng.randint(0, 800))]),
            )
        )
    return sorted(out, key=lambda j: j.submit_s)


Cycle = tuple[int, float, Snapshot, list[QueuedJob], CycleResult]  # seq, time, ..., the queue


def seeded_params(seed: int) -> SimParams:
    return SimParams(backfill=seed % 2 == 0, half_life_s=900, max_active_jobs=1 + seed % 3)


def seeded_run(seed: int) -> tuple[list[Delivered], dict, list[Cycle]]:
    buf = io.BytesIO()
    cycles: list[Cycle] = []

    def seen(seq: int, now: float, snap: Snapshot, result: CycleResult) -> None:
        cycles.append((seq, now, snap, list(snap.queue), result))  # the queue moves on

    summary = simulate(CLUSTER, seeded_workload(seed), seeded_params(seed), buf, on_cycle=seen)
    events = [decode(line) for line in buf.getvalue().splitlines()]
    log = [Delivered(i, subject_for(e), e, {}) for i, e in enumerate(events, start=1)]
    return log, summary, cycles


SEEDS = list(range(12))
