"""`jpu` REST subcommands without a server: arguments → request body, API bodies → tables,
error envelopes → one line (SPEC U1). The same commands against the real gateway are in
test_cli_gateway.py."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import httpx
import pytest

from jpu.cli.main import build_parser, main
from jpu.cli.rest import views
from jpu.cli.rest.client import DEFAULT_URL, ApiError, RestError, decode, resolve_target
from jpu.cli.rest.render import fmt_duration, fmt_usage, table
from jpu.cli.rest.subcommands import submit_body
from jpu.policy.time_limits import parse_time_limit

# SPEC U1: one rule with the console's form (console/time.js), one file of cases both tests read
TIME_LIMITS = json.loads((Path(__file__).parents[1] / "fixtures" / "time_limits.json").read_text())


@pytest.mark.parametrize(("text", "seconds"), TIME_LIMITS["valid"])
def test_U1_time_limit_like_sbatch(text: str, seconds: int | None) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", TIME_LIMITS["invalid"])
def test_U1_bad_time_limits_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time_limit(text)


def _args(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["submit", *argv])


def test_U1_submit_body_from_a_script_file(tmp_path: Path) -> None:
    script = tmp_path / "train model.sh"
    script.write_text('#!/bin/bash\npython train.py "$@"\n')
    body = submit_body(
        _args(str(script), "--gpus", "2", "--tier", "rtx4090", "--tier", "rtx3080ti,a100",
              "--time", "1:00:00", "--env", "A=1", "--env", "B=x=y", "--min-vram", "20")
    )  # fmt: skip
    assert body == {
        "name": "train_model.sh",
        "command": '#!/bin/bash\npython train.py "$@"\n',
        "num_gpus": 2,
        "tiers": ["rtx4090", "rtx3080ti", "a100"],
        "time_limit_s": 3600,
        "env": {"A": "1", "B": "x=y"},
        "min_vram_gb": 20,
        "chdir": os.getcwd(),  # U5: like sbatch, the job runs where it was submitted from
    }


def test_U1_submit_body_from_wrap_and_stdin() -> None:
    body = submit_body(_args("--wrap", "nvidia-smi; echo 'done'", "-J", "probe"))
    assert body == {
        "name": "probe", "command": "nvidia-smi; echo 'done'", "num_gpus": 1,
        "chdir": os.getcwd(),
    }  # fmt: skip
    body = submit_body(_args("-"), stdin=io.StringIO("echo hi\n"))
    assert body["command"] == "echo hi\n" and body["name"] == "stdin"


def test_U5_submit_chdir_is_the_current_directory_or_chdir_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert submit_body(_args("--wrap", "true"))["chdir"] == str(tmp_path)
    assert submit_body(_args("--wrap", "true", "-D", "sub/dir"))["chdir"] == str(
        tmp_path / "sub" / "dir"
    )
    assert submit_body(_args("--wrap", "true", "--chdir", "/data/p"))["chdir"] == "/data/p"


def test_U5_logs_arguments() -> None:
    args = build_parser().parse_args(["logs", "j1"])
    assert (args.job_id, args.attempt, args.follow, args.stderr) == ("j1", None, False, False)
    args = build_parser().parse_args(["logs", "j1", "--attempt", "2", "-f", "--stderr"])
    assert (args.attempt, args.follow, args.stderr) == (2, True, True)


@pytest.mark.parametrize(
    "argv",
    [[], ["x.sh", "--wrap", "true"], ["--wrap", "true", "--env", "NOEQUALS"],
     ["--wrap", "true", "--time", "soon"]],
    ids=["neither", "both", "bad-env", "bad-time"],
)  # fmt: skip
def test_U1_submit_argument_errors(argv: list[str]) -> None:
    with pytest.raises(RestError):
        submit_body(_args(*argv))


def test_U1_errors_exit_nonzero_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["submit", "--wrap", "true", "--time", "soon", "--url", "http://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and err.startswith("jpu submit: error: time limit")
    rc = main(["queue", "--url", "http://127.0.0.1:1", "--token", "t"])
    err = capsys.readouterr().err
    assert rc == 1 and err.count("\n") == 1 and "cannot reach http://127.0.0.1:1" in err


def test_A_error_envelope_becomes_code_and_message() -> None:
    envelope = {"error": {"code": "NO_FIT_PLACEMENT", "message": "no placement can run 4 GPUs",
                          "details": {"field": "num_gpus"}}}  # fmt: skip
    with pytest.raises(ApiError) as e:
        decode(httpx.Response(422, json=envelope))
    assert str(e.value) == "NO_FIT_PLACEMENT: no placement can run 4 GPUs (field: num_gpus)"
    assert e.value.status == 422
    # not the API's JSON (a proxy's page): one line saying who answered, never the page
    with pytest.raises(RestError, match=r"HTTP 502 \(.*\) from the server: the answer is") as e2:
        decode(httpx.Response(502, text="<html>bad gateway</html>"))
    assert "<html>" not in str(e2.value)
    assert decode(httpx.Response(200, json={"ok": 1})) == {"ok": 1}


def test_U1_target_from_flags_env_then_config_file(tmp_path: Path) -> None:
    cfg = tmp_path / "jpu" / "config.toml"
    cfg.parent.mkdir()
    cfg.write_text('url = "https://jpu.example.org/"\ntoken = "from-file"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path)}
    assert resolve_target(env=env).url == "https://jpu.example.org"
    assert resolve_target(env=env).token == "from-file"
    env_over = {**env, "JPU_TOKEN": "from-env"}
    assert resolve_target(env=env_over).token == "from-env"
    assert resolve_target("http://x:1", "flag", env=env_over).token == "flag"
    assert resolve_target(env={"XDG_CONFIG_HOME": str(tmp_path / "none")}).url == DEFAULT_URL


QUEUE = {
    "as_of": 1700000000.0,
    "maintenance": "NORMAL",
    "queue": [
        {"rank": 1, "job_id": "j1", "name": "train", "lab": "KDG", "user": "carol",
         "num_gpus": 2, "tiers": None, "state": "RESERVING", "lab_usage": 28000.0,
         "pending_reason": "Reservation"},
        {"rank": 2, "job_id": "j2", "name": "eval", "lab": "BCG", "user": "alice",
         "num_gpus": 1, "tiers": ["rtx4090"], "state": "GLOBAL_QUEUE_WAIT",
         "lab_usage": 32000.4, "pending_reason": "Priority"},
        {"rank": None, "job_id": "j3", "name": "big", "lab": "BCG", "user": "alice",
         "num_gpus": 1, "tiers": None, "state": "PERSONAL_QUEUE_WAIT", "lab_usage": 32000.4,
         "pending_reason": "ConcurrencyLimit"},
    ],
}  # fmt: skip


def test_U1_queue_table_like_squeue() -> None:
    running = {"rank": None, "job_id": "j4", "name": "run", "lab": "OSL", "user": "erin",
               "num_gpus": 2, "tiers": None, "state": "RUNNING", "lab_usage": 1000.0,
               "lab_accrued_uncharged": 615_054.0,
               "placement": {"node": "gpu-4090x2-01", "tier": "rtx4090", "gpus": [0, 1]},
               "elapsed_s": 3725.0}  # fmt: skip
    lines = views.queue({**QUEUE, "running": [running]}).splitlines()
    assert lines[0].split() == [
        "RANK", "JOBID", "NAME", "LAB", "USER", "GPUS", "TIERS", "STATE", "TIME",
        "LAB_USAGE(CHARGED)", "ACCRUED(UNCHARGED)", "NODELIST(REASON)",
    ]  # fmt: skip
    assert lines[1].split() == [
        "1", "j1", "train", "KDG", "carol", "2", "any", "RESERVING", "-", "28,000", "-",
        "(Reservation)",
    ]  # fmt: skip
    assert lines[2].split()[6] == "rtx4090" and lines[2].split()[9] == "32,000"
    assert lines[3].split()[0] == "-" and lines[3].split()[-1] == "(ConcurrencyLimit)"
    # running jobs too, like squeue: run time and where (SPEC U5)
    assert lines[4].split()[1:] == [
        "j4", "run", "OSL", "erin", "2", "any", "RUNNING", "01:02:05", "1,000", "615,054",
        "gpu-4090x2-01[rtx4090:0,1]",
    ]  # fmt: skip
    draining = views.queue({**QUEUE, "maintenance": "DRAINING"})
    assert draining.startswith("Maintenance: DRAINING")


def test_U1_job_events_usage_pool_views() -> None:
    job = {"id": "j1", "name": "t", "user": "alice", "lab": "BCG", "state": "COMPLETED",
           "attempt": 1, "num_gpus": 2, "tiers": None, "time_limit_s": 3600,
           "submitted_at": 1700000000.0, "started_at": 1700000010.0, "ended_at": 1700001810.0,
           "placement": {"node": "gpu-4090x2-01", "tier": "rtx4090", "gpus": [0, 1]},
           "backend_job_id": "local-j1-1", "isolation": "netns", "exit_code": 0,
           "usage_charged": 297360.0, "command": "python train.py\n"}  # fmt: skip
    shown = views.job(job)
    assert "Placement: gpu-4090x2-01 rtx4090 gpus=0,1" in shown
    assert "RunTime: 00:30:00" in shown and "UsageCharged: 297,360" in shown
    assert "Isolation: netns" in shown and shown.endswith("--- command ---\npython train.py")
    ended = {
        "seq": 7, "type": "JobEnded", "ts": 1700000000.0, "event_id": "e", "job_id": "j1",
        "state": "COMPLETED", "exit_code": 0, "gpu_seconds_run": 3600.0, "oom": False,
        "gpus": [0, 1],
    }  # fmt: skip
    ev = views.events({"events": [ended]})
    assert ev.splitlines()[1].split()[3:] == [
        "JobEnded", "state=COMPLETED", "exit_code=0", "gpu_seconds_run=3600", "gpus=0,1",
    ]  # fmt: skip
    labs = views.labs({"labs": [
        {"lab": "BCG", "usage": 32000.0, "raw_value": 33000.0, "as_of": None, "running": 1,
         "queued": 2, "personal_queue": 0},
        {"lab": "KDG", "usage": 28000.0, "raw_value": 28000.0, "as_of": None}]})  # fmt: skip
    assert [line.split()[0] for line in labs.splitlines()[1:3]] == ["KDG", "BCG"]  # low first
    pool = views.pool({"placements": [
        {"node": "gpu-4090x2-01", "tier": "rtx4090", "capacity": 2, "idle": 0, "down": 0,
         "running": [{"job_id": "j1", "gpus": [0]}], "reserved": [{"job_id": "j2", "gpus": [1]}],
         "backfilled": []}]})  # fmt: skip
    assert pool.splitlines()[1].split() == [
        "gpu-4090x2-01", "rtx4090", "2", "0", "0", "j1[0]", "j2[1]", "-",
    ]  # fmt: skip
    assert views.maintenance({"state": "ACTIVE", "since": None, "message": "nfs"}) == (
        "Maintenance: ACTIVE: nfs"
    )


def test_render_helpers() -> None:
    assert fmt_usage(297360.0) == "297,360" and fmt_usage(None) == "-"
    assert fmt_duration(90061) == "1-01:01:01" and fmt_duration(None) == "-"
    assert table(["A", "BB"], [["x", None], ["long", [1, 2]]]).splitlines() == [
        "A     BB", "x     -", "long  1,2",
    ]  # fmt: skip
