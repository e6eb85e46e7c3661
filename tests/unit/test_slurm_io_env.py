"""SPEC U6 (what -o/-e/--open-mode/--signal mean) and U7 (the SLURM_* variables), pure."""

from __future__ import annotations

import signal
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jpu.domain import arrays, limits, slurm_env, slurm_io
from jpu.domain.validation import slurm_io_problems
from jpu.events import JobArray, JobSubmitted

FACTS = slurm_io.PatternFacts(job_id="a1b2", name="train", user="alice", node="gpu-01")
TASK = slurm_io.PatternFacts(
    job_id="a1b2_7", name="train", user="alice", node="gpu-01", array_job_id="a1b2",
    array_task_id=7,
)  # fmt: skip


@pytest.mark.parametrize(
    ("pattern", "facts", "expected"),
    [
        ("slurm-%j.out", FACTS, "slurm-a1b2.out"),
        ("%x-%J.log", FACTS, "train-a1b2.log"),
        ("logs/%u/%N/%j.txt", FACTS, "logs/alice/gpu-01/a1b2.txt"),
        ("%A_%a.out", TASK, "a1b2_7.out"),
        ("%A_%4a.out", TASK, "a1b2_0007.out"),
        ("%A_%a.out", FACTS, "a1b2_4294967294.out"),  # Slurm's %a outside an array
        ("100%%-%j", FACTS, "100%-a1b2"),
        ("odd-%q-%", FACTS, "odd-%q-%"),  # unknown letters are kept as written
        ("/scratch/alice/%j/out", FACTS, "/scratch/alice/a1b2/out"),
    ],
)
def test_U6_output_file_patterns(pattern: str, facts: slurm_io.PatternFacts, expected: str) -> None:
    assert slurm_io.expand(pattern, facts) == expected


def test_U6_error_defaults_to_the_output_file_and_nothing_without_either() -> None:
    assert slurm_io.files("o_%j", None, FACTS) == ("o_a1b2", "o_a1b2")
    assert slurm_io.files("o_%j", "e_%j", FACTS) == ("o_a1b2", "e_a1b2")
    assert slurm_io.files(None, "e_%j", FACTS) == (None, "e_a1b2")
    assert slurm_io.files(None, None, FACTS) == (None, None)


def test_U6_open_mode() -> None:
    assert slurm_io.open_mode(None) == "truncate"
    assert slurm_io.open_mode("truncate") == "truncate"
    assert slurm_io.open_mode("append") == "append"
    assert slurm_io.open_mode("A") == "append"


@pytest.mark.parametrize(
    ("value", "signum", "before", "batch"),
    [
        ("USR1", signal.SIGUSR1, 60, False),
        ("B:USR1@5", signal.SIGUSR1, 5, True),
        ("R:SIGTERM@120", signal.SIGTERM, 120, False),
        ("10@90", 10, 90, False),
        ("B:2", signal.SIGINT, 60, True),
        ("usr2@30", signal.SIGUSR2, 30, False),
    ],
)
def test_U6_signal_parses(value: str, signum: int, before: int, batch: bool) -> None:
    spec = slurm_io.parse_signal(value)
    assert (spec.signum, spec.before_s, spec.batch_only) == (signum, before, batch)


@pytest.mark.parametrize("value", ["", "B:", "X:USR1", "USR1@", "NOPE@5", "999", "USR1@99999"])
def test_U6_signal_refused(value: str) -> None:
    with pytest.raises(ValueError, match="--signal"):
        slurm_io.parse_signal(value)


def test_U6_signal_delay_counts_back_from_the_limit() -> None:
    spec = slurm_io.parse_signal("B:USR1@5")
    assert slurm_io.signal_delay(spec, 30.0) == 25.0
    assert slurm_io.signal_delay(spec, 3.0) == 0.0  # T above the limit: at once
    assert slurm_io.signal_delay(spec, None) is None  # no limit: never


def test_U6_submit_fields_checked() -> None:
    ok = {"output": "o_%j.txt", "error": "e.txt", "open_mode": "append", "signal": "B:USR1@60"}
    assert slurm_io_problems(ok) == []
    bad = {"output": "", "error": 3, "open_mode": "sometimes", "signal": "USR1@soon"}
    assert [e.field for e in slurm_io_problems(bad)] == ["output", "error", "open_mode", "signal"]


def test_U7_slurm_env_of_an_attempt() -> None:
    facts = slurm_env.JobFacts(
        job_id="a1b2", name="train", user="alice", submit_dir="/home/alice/p", node="gpu-01",
        tier="rtx4090", gpus=[0, 1], cpus=16, mem_gb=64, attempt=3,
    )  # fmt: skip
    env = slurm_env.slurm_env(facts)
    assert env["SLURM_JOB_ID"] == "a1b2"
    assert env["SLURM_JOB_NAME"] == "train"
    assert env["SLURM_SUBMIT_DIR"] == "/home/alice/p"
    assert env["SLURM_JOB_NUM_NODES"] == env["SLURM_NTASKS"] == "1"
    assert env["SLURM_CPUS_PER_TASK"] == "16"
    assert env["SLURM_GPUS"] == env["SLURM_GPUS_ON_NODE"] == "2"
    assert env["SLURM_JOB_GPUS"] == "0,1"
    assert env["SLURM_JOB_NODELIST"] == "gpu-01"
    assert env["SLURM_JOB_PARTITION"] == "rtx4090"
    assert env["SLURM_RESTART_COUNT"] == "2"


def test_U7_array_task_env_has_count_min_max_step() -> None:
    submit = JobSubmitted(
        event_id="e", ts=0.0, job_id="arr1", lab="BCG", user="alice", name="sweep",
        command="true", num_gpus=1, array=JobArray(tasks=[2, 4, 6, 8], spec="2-8:2"),
    )  # fmt: skip
    task = arrays.task_of(submit, 6)
    assert {k: v for k, v in task.env.items() if k.startswith("SLURM_")} == {
        "SLURM_ARRAY_JOB_ID": "arr1",
        "SLURM_ARRAY_TASK_ID": "6",
        "SLURM_ARRAY_TASK_COUNT": "4",
        "SLURM_ARRAY_TASK_MIN": "2",
        "SLURM_ARRAY_TASK_MAX": "8",
        "SLURM_ARRAY_TASK_STEP": "2",
    }
    uneven = slurm_env.array_env("arr1", 5, [1, 5, 9, 10])
    assert uneven["SLURM_ARRAY_TASK_STEP"] == "1"


def test_U7_Q7_an_arrays_count_min_max_step_are_read_once_per_array_not_once_per_task(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The shape is the same for every task and costs O(N): read once, an array's N tasks are
    built in O(N), not O(N²); each task's variables are those `task_of` gives it alone."""
    reads: list[int] = []
    shape = slurm_env.array_shape

    def counted(tasks: Sequence[int], index: int) -> tuple[int, int, int, int]:
        reads.append(len(tasks))
        return shape(tasks, index)

    monkeypatch.setattr(slurm_env, "array_shape", counted)
    submit = JobSubmitted(
        event_id="e", ts=0.0, job_id="arr1", lab="BCG", user="alice", name="sweep",
        command="true", num_gpus=1, array=JobArray(tasks=list(range(0, 3000, 3)), spec="0-2999:3"),
    )  # fmt: skip
    tasks = arrays.tasks_of(submit)
    assert reads == [1000]
    assert [t.env for t in tasks[::250]] == [
        arrays.task_of(submit, k).env for k in (0, 750, 1500, 2250)
    ]
    assert tasks[5].env["SLURM_ARRAY_TASK_STEP"] == "3"
    assert tasks[5].env["SLURM_ARRAY_TASK_MAX"] == "2997"


def test_U6_submit_records_the_options_on_JobSubmitted_and_the_agent_launches_with_them() -> None:
    from pathlib import Path
    from typing import cast

    from jpu.commands import SubmitCommand
    from jpu.config import load_config
    from jpu.domain.execution import AgentJob
    from jpu.domain.states import JobView
    from jpu.domain.submission import Submit, checked, submitted
    from jpu.events import JobDispatched
    from jpu_services.slurm_agent.launch import launch_spec

    config = load_config(env={})
    tiers = {t.name: t for t in config.tiers}
    body = {
        "command": "echo hi", "num_gpus": 1, "name": "ck", "output": "o_%j.txt",
        "error": "e_%j.txt", "open_mode": "append", "signal": "B:USR1@5",
    }  # fmt: skip
    cmd = SubmitCommand(user="alice", lab="BCG", body=body)
    sub = checked(cmd, tiers)
    assert isinstance(sub, Submit)
    event = submitted(sub, "j1", 1.0, "e1")
    assert (event.output, event.error, event.open_mode, event.signal) == (
        "o_%j.txt", "e_%j.txt", "append", "B:USR1@5",
    )  # fmt: skip
    tier = next(iter(tiers.values()))
    dispatched = JobDispatched(
        event_id="e2", ts=2.0, job_id="j1", attempt=1, node="n1", tier=tier.name, gpus=[0],
    )  # fmt: skip
    view = cast(JobView, None)  # launch_spec reads the submit and the dispatch only
    job = AgentJob(view=view, submitted=event, dispatched=dispatched)
    spec = launch_spec(job, tier, Path("/tmp/out"))
    assert (spec.name, spec.output, spec.error, spec.open_mode, spec.signal) == (
        "ck", "o_%j.txt", "e_%j.txt", "append", "B:USR1@5",
    )  # fmt: skip


@given(st.from_regex(limits.SIGNAL_PATTERN, fullmatch=True))
def test_U6_every_signal_the_schema_allows_is_one_the_job_gets(value: str) -> None:
    """The submit's `signal` pattern (schema and check alike) admits only what parse_signal
    reads: a schema-valid signal is never refused, never dropped at launch."""
    spec = slurm_io.parse_signal(value)
    assert spec.signum > 0 and 0 <= spec.before_s <= slurm_io.MAX_SIGNAL_TIME_S
