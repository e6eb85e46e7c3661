"""Slurm's names for the API's jobs (SPEC U1; issue 28 item 6): states, times, squeue's `%`
fields with their widths, sacct's columns and parsable lines, `scontrol show job`. Literal cases
of the pure module jpu.cli.slurm_format."""

from __future__ import annotations

import time

import pytest

from jpu.cli import slurm_format as sf
from jpu.cli.slurm_commands import matches, split_ids

T0 = time.mktime((2026, 12, 4, 10, 0, 0, 0, 0, -1))  # local time, as Slurm prints it

RUNNING = {
    "job_id": "a1b2c3d4e5f6a7b8c9d0e1f2", "name": "train-resnet50", "user": "bcg-alice",
    "lab": "BCG", "num_gpus": 2, "tiers": ["rtx4090"], "state": "RUNNING", "attempt": 1,
    "placement": {"node": "node1", "tier": "rtx4090", "gpus": [0, 1]}, "started_at": T0,
    "elapsed_s": 3723.4, "time_limit_s": 7200, "submitted_at": T0 - 60, "rank": None,
}  # fmt: skip
PENDING = {
    "job_id": "ffee00112233445566778899", "name": "sweep", "user": "bcg-bob", "lab": "BCG",
    "num_gpus": 1, "tiers": None, "state": "GLOBAL_QUEUE_WAIT", "attempt": 1, "rank": 3,
    "pending_reason": "Resources", "time_limit_s": None, "submitted_at": T0,
}  # fmt: skip


@pytest.mark.parametrize(
    ("state", "reason", "expected"),
    [
        ("PERSONAL_QUEUE_WAIT", None, ("PENDING", "PD")),
        ("GLOBAL_QUEUE_WAIT", None, ("PENDING", "PD")),
        ("RESERVING", None, ("PENDING", "PD")),
        ("DISPATCHED", None, ("RUNNING", "R")),
        ("RUNNING", None, ("RUNNING", "R")),
        ("CANCELLING", None, ("COMPLETING", "CG")),
        ("COMPLETED", None, ("COMPLETED", "CD")),
        ("FAILED", "NonZeroExitCode", ("FAILED", "F")),
        ("FAILED", "TIMEOUT", ("TIMEOUT", "TO")),
        ("FAILED", "OOM", ("OUT_OF_MEMORY", "OOM")),
        ("FAILED", "NODE_FAIL: launch failed", ("NODE_FAIL", "NF")),
        ("CANCELLED", "cancelled", ("CANCELLED", "CA")),
    ],
)
def test_U1_every_job_state_has_slurms_name(
    state: str, reason: str | None, expected: tuple[str, str]
) -> None:
    assert sf.slurm_state({"state": state, "reason": reason}) == expected


def test_U1_times_as_slurm_prints_them() -> None:
    assert [sf.duration(s) for s in (None, 0, 59, 61, 3723, 90061)] == [
        "0:00", "0:00", "0:59", "1:01", "1:02:03", "1-01:01:01",
    ]  # fmt: skip
    assert sf.limit(None) == "UNLIMITED" and sf.limit(1800) == "30:00"
    assert sf.stamp(T0) == "2026-12-04T10:00:00" and sf.stamp(None) == "N/A"
    assert sf.exit_code({"exit_code": 3}) == "3:0"
    assert sf.exit_code({"exit_code": -9}) == "0:9"
    assert sf.exit_code({"exit_code": None, "state": "CANCELLED"}) == "0:15"


def test_U1_squeue_default_format_is_squeues_own() -> None:
    out = sf.squeue([RUNNING, PENDING], sf.DEFAULT_SQUEUE, now=T0)
    lines = out.splitlines()
    assert lines[0] == (
        "                   JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)"
    )
    assert lines[1] == (
        "a1b2c3d4e5f6a7b8c9d0e1f2   rtx4090 train-re bcg-alic  R    1:02:03      1 node1"
    )  # %.8j and %.8u cut, as squeue does
    assert lines[2].split() == [
        PENDING["job_id"], "any", "sweep", "bcg-bob", "PD", "0:00", "1", "(Resources)",
    ]  # fmt: skip
    task = {**PENDING, "job_id": PENDING["job_id"] + "_12"}  # an id is never cut
    assert sf.squeue([task], "%.18i|", now=T0, header=False) == task["job_id"] + "|"


def test_U1_squeue_common_fields_and_widths() -> None:
    fmt = "%i|%j|%u|%t|%T|%M|%l|%D|%R|%P|%b|%a|%V|%S|%N|%L|%r|%%"
    running = sf.squeue([RUNNING], fmt, now=T0, header=False)
    assert running.split("|") == [
        RUNNING["job_id"], "train-resnet50", "bcg-alice", "R", "RUNNING", "1:02:03", "2:00:00",
        "1", "node1", "rtx4090", "gpu:2", "BCG", "2026-12-04T09:59:00", "2026-12-04T10:00:00",
        "node1", "57:56", "None", "%",
    ]  # fmt: skip
    pending = sf.squeue([PENDING], fmt, now=T0, header=False).split("|")
    assert pending[3:9] == ["PD", "PENDING", "0:00", "UNLIMITED", "1", "(Resources)"]
    assert pending[13:15] == ["N/A", ""]  # not started; no node
    assert sf.squeue([], "%.5i %-6u|%10j|", now=T0) == "JOBID USER  |NAME      |"
    assert sf.squeue([PENDING], "%.5u %-6u|%10j|", now=T0, header=False) == (
        "bcg-b bcg-bo|sweep     |"
    )


def test_U1_squeue_refuses_an_unknown_field_naming_it() -> None:
    with pytest.raises(ValueError, match="%Y is not supported"):
        sf.parse_format("%i %Y")


def test_U1_sacct_columns_parsable_and_widths() -> None:
    done = {
        "id": "0123456789abcdef01234567", "name": "train", "user": "bcg-alice", "lab": "BCG",
        "state": "COMPLETED", "exit_code": 0, "started_at": T0, "ended_at": T0 + 125,
        "placement": {"node": "node1", "tier": "rtx4090", "gpus": [0]}, "num_gpus": 1,
    }  # fmt: skip
    fmt = "JobID,JobName,State,Elapsed,ExitCode,Partition,NodeList"
    assert sf.sacct([done], fmt, T0 + 999, sep="|") == (
        "JobID|JobName|State|Elapsed|ExitCode|Partition|NodeList\n"
        "0123456789abcdef01234567|train|COMPLETED|2:05|0:0|rtx4090|node1"
    )
    assert sf.sacct([done], "jobid,state", T0, header=False, sep="|", trailing=True) == (
        "0123456789abcdef01234567|COMPLETED|"
    )
    table = sf.sacct([done], "JobID,JobName%-20,State%6", T0).splitlines()
    assert table[0] == "                     JobID JobName               State"
    assert table[1] == "-------------------------- -------------------- ------"
    # a 24-digit id whole; a cut value ends in '+', as sacct
    assert table[2] == "  0123456789abcdef01234567 train                COMPL+"
    assert sf.sacct([done], "JobID%5", T0, header=False) == done["id"]  # an id is never cut
    with pytest.raises(ValueError, match="unknown field 'Bogus'"):
        sf.parse_sacct_format("JobID,Bogus")


def test_U1_scontrol_show_job_key_value_lines() -> None:
    job = {**RUNNING, "id": RUNNING["job_id"], "chdir": "/tmp/p", "held": False,
           "dependency": None, "exit_code": None}  # fmt: skip
    lines = sf.scontrol_show(job, T0).splitlines()
    assert lines[0] == f"JobId={RUNNING['job_id']} JobName=train-resnet50"
    pairs = dict(kv.split("=", 1) for line in lines for kv in line.split())
    assert pairs["JobState"] == "RUNNING" and pairs["Partition"] == "rtx4090"
    assert pairs["NodeList"] == "node1" and pairs["TimeLimit"] == "2:00:00"
    assert pairs["RunTime"] == "1:02:03" and pairs["WorkDir"] == "/tmp/p"
    assert pairs["StartTime"] == "2026-12-04T10:00:00" and pairs["EndTime"] == "2026-12-04T12:00:00"
    assert pairs["TRES"] == "gres/gpu=2,node=1" and pairs["UserId"] == "bcg-alice"
    assert all(line.startswith("   ") for line in lines[1:])
    assert "\n" not in sf.scontrol_show(job, T0, one_line=True)


def test_U8_slurm_commands_take_id_lists_prefixes_and_tasks() -> None:
    assert split_ids(["a1,b2", "c3_[2-4,7]"]) == ["a1", "b2", "c3_[2-4,7]"]
    assert matches("a1b2c3", "a1b") and not matches("a1b2c3", "b2")
    assert matches("a1b2c3_4", "a1b_4") and not matches("a1b2c3_4", "a1b_5")
    assert matches("a1b2c3_3", "a1b_[2-4,7]") and matches("a1b2c3_7", "a1b_[2-4,7]")
    assert not matches("a1b2c3_5", "a1b_[2-4,7]") and not matches("a1b2c3", "a1b_[2-4]")
