"""Builders for simulator tests: literal workloads on literal clusters, run through `jpu.sim`
(the `simulate` fixture of tests/unit/sim/conftest.py is `make_simulate` on a test's tmp_path)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from jpu.bus import Delivered
from jpu.config import DEFAULT_PATH, Config, load_config
from jpu.events import AnyEvent
from jpu.sim.eventlog import read_events
from jpu.sim.params import SimParams
from jpu.sim.run import run_files

DEFAULT_CLUSTER = yaml.safe_load(DEFAULT_PATH.read_text())  # SPEC §1.1 default cluster


class Run:
    def __init__(self, out: Path, summary: dict[str, Any]) -> None:
        self.out = out
        self.summary = summary
        self.events: list[AnyEvent] = read_events(out / "events.jsonl")

    def of(self, type_name: str, job_id: str | None = None) -> list[Any]:
        return [
            e
            for e in self.events
            if type(e).__name__ == type_name
            and (job_id is None or getattr(e, "job_id", None) == job_id)
        ]

    def job(self, job_id: str) -> dict[str, Any]:
        return self.summary["jobs"][job_id]

    def usage(self, lab: str) -> float:
        return self.summary["labs"][lab]["usage_tflop_s"]


Simulate = Callable[..., Run]


def make_simulate(tmp_path: Path) -> Simulate:
    """simulate(jobs, labs=None, nodes=None, tiers=None, **params) -> Run."""
    counter = {"n": 0}

    def run(
        jobs: list[dict[str, Any]],
        labs: list[dict[str, Any]] | None = None,
        nodes: list[dict[str, Any]] | None = None,
        tiers: list[dict[str, Any]] | None = None,
        **params: Any,
    ) -> Run:
        counter["n"] += 1
        d = tmp_path / f"run{counter['n']}"
        d.mkdir()
        cluster = {
            "tiers": tiers or DEFAULT_CLUSTER["tiers"],
            "nodes": nodes or DEFAULT_CLUSTER["nodes"],
            "labs": labs or [],
        }
        (d / "cluster.yaml").write_text(yaml.safe_dump(cluster))
        (d / "jobs.jsonl").write_text("".join(json.dumps(j) + "\n" for j in jobs))
        params.setdefault("backfill", False)
        summary = run_files(d / "cluster.yaml", d / "jobs.jsonl", d / "out", SimParams(**params))
        return Run(d / "out", summary)

    return run


HALF_LIFE = 7 * 24 * 3600.0
ONE_4090_NODE = [{"name": "n1", "gpus": {"rtx4090": 2}}]


def job(
    id: str, lab: str, user: str, submit_s: float, num_gpus: int, duration_s: float
) -> dict[str, Any]:
    return {"id": id, "lab": lab, "user": user, "submit_s": submit_s, "num_gpus": num_gpus,
            "duration_s": duration_s}  # fmt: skip


def r3_example(simulate: Simulate) -> tuple[Run, Config, list[Delivered]]:
    """SPEC R3: Y (BCG, 1 GPU) runs; X (BCG, 2 GPUs) rank 1 reserves the other rtx4090 at T+0;
    Z (KDG, 2 GPUs) waits behind it (BCG 24,000 < KDG 28,000). Y ends 300 s after X reserved:
    its cost lifts BCG above KDG, the next cycle demotes X (1 × 300 × 82.6 = 24,780 at once)."""
    labs = [{"name": "BCG", "usage": 24_000}, {"name": "KDG", "usage": 28_000}]
    jobs = [
        job("y", "BCG", "bob", 0, 1, 301),
        job("x", "BCG", "alice", 1, 2, 1000),
        job("z", "KDG", "kim", 1, 2, 500),
    ]
    run = simulate(jobs, labs=labs, nodes=ONE_4090_NODE, half_life_s=HALF_LIFE)
    config = load_config(Path(run.out).parent / "cluster.yaml", env={})
    assert config.half_life_s == HALF_LIFE
    log = [Delivered(i + 1, "sim", e, {}) for i, e in enumerate(run.events)]
    return run, config, log
