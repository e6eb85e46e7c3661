"""The Slurm backend's pure parts: Slurm's words → the contract's, the sbatch request (SPEC X1–X3,
X6, X9). Literal inputs as Slurm 22.05 prints them (SLURM-NOTES)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from jpu.backends import LaunchSpec
from jpu.backends.isolation import NONE, netns
from jpu.backends.slurm.jobs import adopt, comment_for, never_ran, parse_comment, status_of
from jpu.backends.slurm.parse import (
    SlurmJob,
    decode_wait_status,
    gres_counts,
    inventory_from_sinfo,
    job_from_sacct,
    job_from_squeue,
    map_state,
)
from jpu.backends.slurm.pyslurm_api import job_from_pyslurm
from jpu.backends.slurm.records import SlurmRecord
from jpu.backends.slurm.submit import (
    enforced_by_backend,
    export_file,
    job_env,
    sbatch_argv,
    time_minutes,
    wrapper,
)


@pytest.mark.parametrize(
    ("slurm", "ours"),
    [
        ("PENDING", "PENDING"), ("RUNNING", "RUNNING"), ("COMPLETING", "RUNNING"),
        ("COMPLETED", "COMPLETED"), ("FAILED", "FAILED"), ("TIMEOUT", "TIMEOUT"),
        ("CANCELLED", "CANCELLED"), ("CANCELLED by 0", "CANCELLED"), ("NODE_FAIL", "NODE_FAIL"),
        ("PREEMPTED", "PREEMPTED"), ("OUT_OF_MEMORY", "OUT_OF_MEMORY"), ("BOOT_FAIL", "NODE_FAIL"),
        ("REQUEUED", "PENDING"), ("DEADLINE", "TIMEOUT"), ("", "PENDING"),
    ],
)  # fmt: skip
def test_X6_slurm_states_map_to_the_contracts(slurm: str, ours: str) -> None:
    assert map_state(slurm) == ours


def test_X6_raw_wait_status_decodes_to_exit_code_or_signal() -> None:
    assert decode_wait_status(768) == (3, None)  # exit 3
    assert decode_wait_status(0) == (0, None)
    assert decode_wait_status(9) == (None, 9)  # SIGKILL
    assert decode_wait_status(15) == (None, 15)  # a TIMEOUT's SIGTERM
    assert decode_wait_status(None) == (None, None)


def test_squeue_job_fields() -> None:
    job = job_from_squeue({
        "job_id": 7, "name": "jpu-j1-2", "job_state": "FAILED", "state_reason": "NonZeroExitCode",
        "user_name": "jpu-alice", "nodes": "gpu-4090x2-01", "exit_code": 768,
        "start_time": 100, "end_time": 0, "comment": "jpu isolation=netns limit=1.5",
        "current_working_directory": "/out/j1/2",
    })  # fmt: skip
    assert job.exit_status == 768 and job.start_time == 100.0 and job.end_time is None
    assert job.terminal and job.node == "gpu-4090x2-01"
    record = adopt(job)
    assert record is not None and (record.job_id, record.attempt) == ("j1", 2)
    assert record.isolation == "netns" and record.time_limit_s == 1.5
    assert record.output_dir == "/out/j1/2" and record.slurm_id == 7


def test_a_refused_submission_never_ran() -> None:
    refused = SlurmJob(job_id=4, name="jpu-x-1", state="FAILED", reason="BadConstraints")
    assert never_ran(refused)
    assert not never_ran(SlurmJob(job_id=5, name="jpu-x-1", state="FAILED", node="n1"))


def test_sacct_line_of_the_jobcomp_log() -> None:
    line = "9|jpu-j-1|FAILED|3:0|2026-11-29T09:01:33|2026-11-29T09:01:35|gpu-4090x2-02|rtx4090|x|/o"
    job = job_from_sacct(line)
    assert job is not None and job.exit_status == 768 and job.state == "FAILED"
    assert job.end_time is not None and job.start_time is not None
    assert job.end_time - job.start_time == 2
    killed = job_from_sacct("8|jpu-k-1|CANCELLED by 0|0:9|Unknown|None||rtx4090|x|/o")
    assert killed is not None and decode_wait_status(killed.exit_status) == (None, 9)
    assert killed.start_time is None and map_state(killed.state) == "CANCELLED"
    assert job_from_sacct("JobID|JobName") is None


def test_inventory_from_sinfo_marks_drained_and_down_gpus() -> None:
    doc = {"nodes": [
        {"name": "a", "state": "idle", "state_flags": [], "gres": "gpu:rtx4090:2", "reason": ""},
        {"name": "b", "state": "mixed", "state_flags": ["DRAIN"], "gres": "gpu:rtx4090:2(S:0)",
         "reason": "kill_failed: 5"},
        {"name": "c", "state": "down", "state_flags": [], "gres": "gpu:a:1,gpu:b:2"},
        {"name": "d", "state": "idle", "state_flags": ["NOT_RESPONDING"], "gres": "gpu:a:1"},
    ]}  # fmt: skip
    inv = {n.node: n for n in inventory_from_sinfo(doc)}
    assert inv["a"].state == "up" and inv["a"].down == {} and inv["a"].gpus == {"rtx4090": 2}
    assert inv["b"].state == "drain" and inv["b"].down == {"rtx4090": [0, 1]}
    assert inv["b"].reason == "kill_failed: 5"
    assert inv["c"].state == "down" and inv["c"].gpus == {"a": 1, "b": 2}
    assert inv["d"].state == "down"
    assert gres_counts("gpu:rtx4090:1(IDX:0),gpu:rtx4090:1(IDX:1)") == {"rtx4090": 2}


def _spec(**kw: object) -> LaunchSpec:
    base: dict[str, object] = {
        "job_id": "j1", "attempt": 2, "user": "alice", "node": "gpu-4090x2-01", "tier": "rtx4090",
        "gpus": [0, 1], "num_gpus": 2, "command": "echo $(rm -rf /) `id`; exit 3",
        "cpus": 16, "mem_gb": 64, "output_dir": "/out/j1/2", "partition": "rtx4090",
        "env": {"A": "x,y z", "JOB_ATTEMPT": "99", "CUDA_VISIBLE_DEVICES": "7"},
    }  # fmt: skip
    base.update(kw)
    return LaunchSpec(**base)  # type: ignore[arg-type]


def test_X1_X3_sbatch_argv_carries_the_placement_and_no_user_text() -> None:
    spec = _spec(time_limit_s=90.0)
    argv = sbatch_argv(spec, 3, comment_for("netns", 90.0))
    assert "--partition=rtx4090" in argv and "--nodelist=gpu-4090x2-01" in argv
    assert "--gres=gpu:rtx4090:2" in argv and "--cpus-per-task=16" in argv
    assert "--mem=64G" in argv and "--time=2" in argv and "--no-requeue" in argv
    assert "--job-name=jpu-j1-2" in argv and "--export-file=3" in argv
    assert "--export=NIL" in argv and "--open-mode=append" in argv
    joined = " ".join(argv)
    assert "rm -rf" not in joined and "x,y z" not in joined  # X3: command and env off the line
    assert b"rm -rf" not in wrapper(netns(["unshare", "--net", "--"]))
    assert wrapper(NONE).startswith(b"#!/bin/bash\n")


def test_X2_environment_platform_variables_win_and_slurm_sets_the_gpus() -> None:
    env = job_env(_spec(), "jpu-alice")
    assert env["JOB_ATTEMPT"] == "2" and env["JOB_OUTPUT_DIR"] == "/out/j1/2"
    assert env["JPU_JOB_ID"] == "j1" and env["A"] == "x,y z"
    assert "CUDA_VISIBLE_DEVICES" not in env  # Slurm's gres plugin sets it from its allocation
    assert b"A=x,y z\0" in export_file(env)


def test_time_limits_whole_minutes_are_slurms_finer_ones_ours() -> None:
    assert time_minutes(None) is None and time_minutes(1.0) == 1 and time_minutes(61) == 2
    assert time_minutes(120) == 2
    assert enforced_by_backend(1.0) and enforced_by_backend(90.0)
    assert not enforced_by_backend(60.0) and not enforced_by_backend(None)


def test_comment_round_trip() -> None:
    assert parse_comment(comment_for("netns", 1.5)) == ("netns", 1.5)
    assert parse_comment(comment_for("none", None)) == ("none", None)
    assert parse_comment("user text limit=abc") == ("none", None)


def _record(**kw: object) -> SlurmRecord:
    base: dict[str, object] = {
        "name": "jpu-j-1", "job_id": "j", "attempt": 1, "user": "alice", "account": "jpu-alice",
        "node": "n1", "output_dir": "", "isolation": "netns", "slurm_id": 5,
    }  # fmt: skip
    base.update(kw)
    return SlurmRecord(**base)  # type: ignore[arg-type]


def test_X5_our_cancel_or_time_limit_names_the_end() -> None:
    killed = SlurmJob(job_id=5, name="jpu-j-1", state="FAILED", exit_status=9, start_time=100,
                      end_time=110, node="n1")  # fmt: skip
    cancelled = status_of(killed, _record(intent="cancel"), 110.4, 1024)
    assert cancelled.state == "CANCELLED" and cancelled.cancelled_by_us and cancelled.signal == 9
    assert cancelled.exit_code is None and cancelled.ended_at == 110.4
    timed_out = status_of(killed, _record(intent="timeout"), 200.0, 1024)
    assert timed_out.state == "TIMEOUT" and not timed_out.cancelled_by_us
    assert timed_out.ended_at == 111.0  # seen late: capped at Slurm's end + 1 s
    plain = status_of(killed, None, None, 1024)
    assert plain.state == "FAILED" and plain.isolation == "none"
    running = SlurmJob(job_id=5, name="jpu-j-1", state="COMPLETING", start_time=100)
    assert not status_of(running, _record(intent="cancel"), None, 1024).terminal


def test_X9_pyslurm_job_objects_become_slurm_jobs() -> None:
    job = SimpleNamespace(
        id=3, name="jpu-j-1", state="FAILED", state_reason="NonZeroExitCode", user_name="u",
        allocated_nodes="n1", batch_host="n1", partition="p", exit_code=3, exit_code_signal=0,
        start_time=10, end_time=12, standard_output="/o/stdout", standard_error="/o/stderr",
        working_directory="/o",
    )  # fmt: skip
    converted = job_from_pyslurm(job)
    assert converted.exit_status == 768 and converted.node == "n1" and converted.terminal
    job.exit_code_signal = 9
    assert decode_wait_status(job_from_pyslurm(job).exit_status) == (None, 9)
