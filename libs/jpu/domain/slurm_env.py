"""SPEC U7: the Slurm variables a batch script reads, with this platform's values. Pure.

One job runs once on one node (U6: `-N 1`, `-n 1`), so the counts are those of one task; the
job id is the platform's (on the Slurm backend it overrides Slurm's own, which names Slurm's
job, not this one). Array variables come from the task's submit (jpu.domain.arrays.env_for).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple


@dataclass(frozen=True)
class JobFacts:
    job_id: str
    name: str
    user: str
    submit_dir: str  # where it was submitted from (U5: its chdir, else its output directory)
    node: str
    tier: str
    gpus: Sequence[int]  # GPU indices on the node
    cpus: int
    mem_gb: int
    attempt: int
    time_limit_s: float | None = None


def slurm_env(f: JobFacts) -> dict[str, str]:
    """The SLURM_* variables of one attempt (U7)."""
    gpu_list = ",".join(str(g) for g in f.gpus)
    env = {
        "SLURM_JOB_ID": f.job_id,
        "SLURM_JOBID": f.job_id,
        "SLURM_JOB_NAME": f.name,
        "SLURM_JOB_USER": f.user,
        "SLURM_SUBMIT_DIR": f.submit_dir,
        "SLURM_SUBMIT_HOST": f.node,
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1",
        "SLURM_NTASKS": "1",
        "SLURM_NPROCS": "1",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_CPUS_PER_TASK": str(f.cpus),
        "SLURM_CPUS_ON_NODE": str(f.cpus),
        "SLURM_JOB_CPUS_PER_NODE": str(f.cpus),
        "SLURM_MEM_PER_NODE": str(f.mem_gb * 1024),  # Slurm speaks MB
        "SLURM_GPUS": str(len(f.gpus)),
        "SLURM_GPUS_ON_NODE": str(len(f.gpus)),
        "SLURM_JOB_GPUS": gpu_list,
        "SLURM_STEP_GPUS": gpu_list,
        "SLURM_JOB_NODELIST": f.node,
        "SLURM_NODELIST": f.node,
        "SLURMD_NODENAME": f.node,
        "SLURM_JOB_PARTITION": f.tier,
        "SLURM_RESTART_COUNT": str(max(0, f.attempt - 1)),
    }
    return env


class ArrayShape(NamedTuple):
    """What every task of one array shares in SLURM_ARRAY_TASK_COUNT/MIN/MAX/STEP (Q7)."""

    size: int  # SLURM_ARRAY_TASK_COUNT (a tuple has a count method)
    lowest: int
    highest: int
    step: int


def array_shape(tasks: Sequence[int], index: int) -> ArrayShape:
    """An array's count, lowest, highest and step (the common difference of its indices, 1 when
    they have none): the same for every task, so an array's tasks share one (Q7: O(N) once per
    array, not once per task)."""
    ordered = sorted(tasks) or [index]
    gaps = {b - a for a, b in itertools.pairwise(ordered)}
    step = gaps.pop() if len(gaps) == 1 else 1
    return ArrayShape(len(ordered), ordered[0], ordered[-1], step)


def array_env(
    array_id: str, index: int, tasks: Sequence[int], shape: ArrayShape | None = None
) -> dict[str, str]:
    """SLURM_ARRAY_* of one task: the array's id, its index, and the array's count, lowest,
    highest and step (`array_shape`; given when the caller already has it)."""
    count, lowest, highest, step = shape or array_shape(tasks, index)
    return {
        "SLURM_ARRAY_JOB_ID": array_id,
        "SLURM_ARRAY_TASK_ID": str(index),
        "SLURM_ARRAY_TASK_COUNT": str(count),
        "SLURM_ARRAY_TASK_MIN": str(lowest),
        "SLURM_ARRAY_TASK_MAX": str(highest),
        "SLURM_ARRAY_TASK_STEP": str(step),
    }
