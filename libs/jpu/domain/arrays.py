"""Job arrays (SPEC Q7). Pure: parsing the `array` field, expanding the one submit event into
its tasks, and the `%N` throttle that promotion (jpu.domain.promotion) honours.

An array is ONE `JobSubmitted` on the array's own subject `<prefix>.job.<array id>`, carrying
every task index (`JobArray`). The log holds nothing else for the array: each task is a job of
its own, `<array id>_<index>`, that every fold derives from that event with `tasks_of` (the
services' ClusterState, the agent, the projections, `EventBus.job_events`). A task's own
subject `<prefix>.job.<array id>_<index>` starts empty, so its first event (JobPromoted) is
appended with expected last subject sequence 0 and every later one with the task's own last
sequence (SPEC E2), exactly like a single job after its submit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import msgspec

from jpu.domain import slurm_env
from jpu.domain.limits import MAX_ARRAY_SPEC
from jpu.events import JobArray, JobSubmitted

# `0-99`, `0-99:2`, `1,5,9`, `0-9,20-29:5`, each with an optional `%N` throttle (Slurm's syntax)
_PART: Final = re.compile(r"^(\d+)(?:-(\d+)(?::(\d+))?)?$")
_TASK_ID: Final = re.compile(r"^(.+)_(\d+)$")
MAX_INDEX: Final = 4_000_000  # Slurm's MaxArraySize ceiling; keeps every index a small integer


class ArrayProblem(ValueError):
    """Why an `array` value is refused (Q7: the 422 names `array`)."""


def parse(value: Any, max_tasks: int) -> JobArray:
    """The `array` field of a submit: a string in Slurm's syntax or a list of task indices.
    Raises ArrayProblem with the reason; duplicates are refused, indices come out sorted."""
    throttle: int | None = None
    if isinstance(value, str):
        if len(value) > MAX_ARRAY_SPEC:
            raise ArrayProblem(f"at most {MAX_ARRAY_SPEC} characters")
        text, _, cap = value.strip().partition("%")
        if cap:
            if not cap.isdigit() or int(cap) < 1:
                raise ArrayProblem("%N must be a positive integer (tasks running at once)")
            throttle = int(cap)
        tasks = _indices(text, max_tasks)
        spec = value.strip()
    elif isinstance(value, list) and value:
        if not all(isinstance(k, int) and not isinstance(k, bool) for k in value):
            raise ArrayProblem("a list of task indices must hold integers only")
        tasks = list(value)
        spec = ",".join(str(k) for k in tasks)
    else:
        raise ArrayProblem('a string like "0-99%8", "0-99:2", "1,5,9", or a list of integers')
    if any(not 0 <= k <= MAX_INDEX for k in tasks):
        raise ArrayProblem(f"task indices go from 0 to {MAX_INDEX}")
    if len(set(tasks)) != len(tasks):
        raise ArrayProblem("a task index appears twice")
    if len(tasks) > max_tasks:
        raise ArrayProblem(f"{len(tasks)} tasks; at most {max_tasks} per array")
    return JobArray(tasks=sorted(tasks), throttle=throttle, spec=spec)


def _indices(text: str, max_tasks: int) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        m = _PART.match(part.strip())
        if m is None:
            raise ArrayProblem(f"{part.strip()!r} is not N, N-M or N-M:S")
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) is not None else first
        step = int(m.group(3)) if m.group(3) is not None else 1
        if last < first or step < 1:
            raise ArrayProblem(f"{part.strip()!r}: N-M needs M ≥ N and a step ≥ 1")
        if last > MAX_INDEX:
            raise ArrayProblem(f"task indices go from 0 to {MAX_INDEX}")
        if (last - first) // step + 1 + len(out) > max_tasks:  # never build a huge list
            raise ArrayProblem(f"more than {max_tasks} tasks per array")
        out.extend(range(first, last + 1, step))
    return out


def task_id(array_id: str, index: int) -> str:
    """A task's job id (also its subject token: `_` and digits are valid in NATS subjects)."""
    return f"{array_id}_{index}"


def split_task_id(job_id: str) -> tuple[str, int] | None:
    """(array id, index) of a task's id; None for a single job (ids are hex, never `_`)."""
    m = _TASK_ID.match(job_id)
    return (m.group(1), int(m.group(2))) if m else None


def env_for(
    array_id: str, index: int, tasks: Sequence[int], shape: slurm_env.ArrayShape | None = None
) -> dict[str, str]:
    """Q7: what the platform puts in a task's environment (also the Slurm names, U7, so a
    script written for `sbatch --array` runs unchanged; Q1 keeps users from setting them).
    `shape`: the array's `slurm_env.array_shape`, when the caller already has it."""
    return {
        "JPU_ARRAY_JOB_ID": array_id,
        "JPU_ARRAY_TASK_ID": str(index),
        "JPU_ARRAY_TASK_COUNT": str(len(tasks)),
        **slurm_env.array_env(array_id, index, tasks, shape),
    }


def tasks_of(event: JobSubmitted) -> list[JobSubmitted]:
    """The jobs one submit creates: itself for a single job, every task for an array (Q7).
    Each task is the array's request with its own id, its index and the array variables."""
    a = event.array
    if a is None or a.array_id is not None:
        return [event]
    # the array's count, min, max and step are read once (O(N)), not once per task (O(N²))
    shape = slurm_env.array_shape(a.tasks, a.tasks[0]) if a.tasks else None
    return [task_of(event, k, shape) for k in a.tasks]


def task_of(
    event: JobSubmitted, index: int, shape: slurm_env.ArrayShape | None = None
) -> JobSubmitted:
    """Task `index` of the array `event` submitted (`shape`: as `env_for`'s)."""
    a = event.array
    assert a is not None
    env = {**event.env, **env_for(event.job_id, index, a.tasks, shape)}
    return msgspec.structs.replace(
        event,
        job_id=task_id(event.job_id, index),
        env=env,
        array=JobArray(tasks=[index], throttle=a.throttle, spec=a.spec, array_id=event.job_id),
    )


def held_back(array_id: str | None, throttle: int | None, holding: Mapping[str, int]) -> bool:
    """A task waits for its array (D7 `ArrayThrottle`): the array's tasks hold its `%N` slots
    (`holding`: array id → its slot-holding tasks, S1)."""
    return array_id is not None and throttle is not None and holding.get(array_id, 0) >= throttle


def throttle_allows(
    queue: Sequence[str],
    array_of: Callable[[str], tuple[str, int | None] | None],
    holding: Mapping[str, int],
) -> Iterator[str]:
    """The personal queue `queue` (oldest first) without the tasks `%N` holds back (Q7): an
    array with throttle N whose tasks hold `holding[array]` slots (S1) lets at most
    N - holding more of its tasks through, the oldest first. `array_of(job id)`: (array id,
    throttle) of a task, None for a single job. Everything else passes, in order (Q5 then takes
    the first ones it has slots for)."""
    taken: dict[str, int] = {}
    for job_id in queue:
        array_id, cap = array_of(job_id) or ("", None)
        if cap is not None:
            used = holding.get(array_id, 0) + taken.get(array_id, 0)
            if used >= cap:
                continue  # ArrayThrottle (D7): waits while its array holds N slots
            taken[array_id] = taken.get(array_id, 0) + 1
        yield job_id
