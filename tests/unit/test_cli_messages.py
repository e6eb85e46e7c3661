"""Messages that say the fix (SPEC U5), pure: API refusals with their details, the
submit line, and did-you-mean for a misspelt flag or command (SPEC U1)."""

from __future__ import annotations

import pytest

from jpu.cli import messages
from jpu.cli.main import build_parser
from jpu.cli.parsing import suggest, unknown_message


def test_U1_no_fit_says_how_many_gpus_the_largest_placement_has() -> None:
    details = {
        "num_gpus": 4, "tiers": None, "min_vram_gb": None,
        "largest_placement": {"gpus": 2, "node": "gpu-4090x2-01", "tier": "rtx4090"},
    }  # fmt: skip
    line = messages.api_error("NO_FIT_PLACEMENT", "no placement can ever run this job", details)
    assert line == (
        "NO_FIT_PLACEMENT: no placement can ever run this job; the largest placement that can "
        "run it has 2 GPUs (rtx4090 on gpu-4090x2-01; a job runs inside one placement, SPEC "
        "P3): ask for --gpus 2 or fewer"
    )
    none = {"num_gpus": 1, "tiers": ["rtx3080ti"], "min_vram_gb": 40, "largest_placement": None}
    line = messages.api_error("NO_FIT_PLACEMENT", "no placement", none)
    assert line.endswith("; no active placement has tier rtx3080ti and at least 40 GB of GPU "
                         "memory (`jpu pool` lists them)")  # fmt: skip


def test_U1_maintenance_refusal_carries_the_admins_message() -> None:
    details = {"state": "DRAINING", "message": "NFS swap, back by 10:00"}
    line = messages.api_error("SERVICE_MAINTENANCE", "the cluster is in maintenance", details)
    assert line == (
        "SERVICE_MAINTENANCE: the cluster is in maintenance "
        "(maintenance DRAINING: NFS swap, back by 10:00)"
    )
    bare = messages.api_error("SERVICE_MAINTENANCE", "in maintenance", {"state": "ACTIVE"})
    assert bare.endswith("(maintenance ACTIVE)")


def test_U1_validation_names_every_field_and_unauthenticated_says_where_the_token_goes() -> None:
    details = {
        "field": "tiers",
        "errors": [
            {"field": "tiers", "message": "unknown tier(s): a100 (tiers here: rtx3080ti, rtx4090)"},
            {"field": "num_gpus", "message": "must be an integer from 1 to 8"},
        ],
    }
    msg = "tiers: unknown tier(s): a100 (tiers here: rtx3080ti, rtx4090)"
    line = messages.api_error("VALIDATION_ERROR", msg, details)
    assert line == f"VALIDATION_ERROR: {msg}; also num_gpus: must be an integer from 1 to 8"
    line = messages.api_error("VALIDATION_ERROR", msg, details, submit=True)
    assert line == (  # jpu submit's: the flags the user typed (--tier, --gpus)
        "VALIDATION_ERROR: --tier: unknown tier(s): a100 (tiers here: rtx3080ti, rtx4090); "
        "also --gpus: must be an integer from 1 to 8"
    )
    line = messages.api_error("UNAUTHENTICATED", "unknown or revoked token", {})
    assert "JPU_TOKEN" in line and "jpu-admin token create USER" in line
    assert messages.api_error("NOT_FOUND", "no job 'x'", {"field": "id"}) == (
        "NOT_FOUND: no job 'x' (field: id)"
    )


def test_U1_submit_says_queued_only_when_the_concurrency_limit_holds_the_job() -> None:
    job = {"id": "j1", "state": "PERSONAL_QUEUE_WAIT"}
    full = {"slots_in_use": 3, "max_active_jobs": 3}
    assert messages.submitted(job, full).startswith(
        "Submitted job j1 — queued (waiting for a free slot: 3 of 3 in use"
    )
    assert messages.submitted(job, {"slots_in_use": 2, "max_active_jobs": 3}) == "Submitted job j1"
    promoted = {"id": "j1", "state": "GLOBAL_QUEUE_WAIT"}
    assert messages.submitted(promoted, full) == "Submitted job j1"  # it got its slot
    assert messages.submitted(job, None) == "Submitted job j1"


@pytest.mark.parametrize(
    ("word", "meant"),
    [("--teir", "--tier"), ("--gpu", "--gpus"), ("--teir=x", "--tier"), ("--chdri", "--chdir")],
)
def test_U1_a_misspelt_flag_names_the_one_probably_meant(word: str, meant: str) -> None:
    known = ["--tier", "--gpus", "--time", "--chdir", "-t", "-G"]
    assert suggest(word, known) == meant
    assert unknown_message([word, "x.sh"], known) == (
        f"unrecognized arguments: {word} (did you mean {meant}?) x.sh"
    )
    assert suggest("--zzzzzz", known) is None


def test_U1_misspelt_flags_and_commands_exit_2_with_the_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv, hint in (
        (["submit", "--wrap", "x", "--teir", "rtx4090"], "--teir (did you mean --tier?)"),
        (["submit", "--wrap", "x", "--ti", "5"], "unrecognized arguments: --ti"),  # no prefixes
        (["queu"], "did you mean 'queue'?"),
        (["--jsn", "queue"], "--jsn (did you mean --json?)"),
    ):
        with pytest.raises(SystemExit) as e:
            build_parser().parse_args(argv)
        assert e.value.code == 2
        assert hint in capsys.readouterr().err


def test_U1_json_url_and_token_before_or_after_the_subcommand() -> None:
    for argv in (["--json", "queue"], ["queue", "--json"]):
        assert build_parser().parse_args(argv).json is True
    args = build_parser().parse_args(["--url", "http://x:1", "show", "j1", "--token", "t"])
    assert (args.url, args.token, args.json) == ("http://x:1", "t", False)


def test_U1_refusals_speak_the_users_flags_and_units() -> None:
    """Issue 28: `--time` in [D-]HH:MM:SS, not `time_limit_s` in seconds; the script (named,
    with its size), not `command`; every further problem likewise."""
    from jpu.cli.messages import api_error, name_script

    errors = [
        {"field": "time_limit_s", "message": "must be positive and at most 31536000"},
        {"field": "command", "message": "must be at most 64 KiB"},
        {"field": "num_gpus", "message": "must be an integer from 1 to 8"},
    ]
    text = api_error(
        "VALIDATION_ERROR",
        "time_limit_s: must be positive and at most 31536000",
        {"field": "time_limit_s", "errors": errors},
        submit=True,
    )
    assert text == (
        "VALIDATION_ERROR: --time: must be positive and at most 365-00:00:00; also the script: "
        "must be at most 64 KiB; --gpus: must be an integer from 1 to 8"
    )
    assert "time_limit_s" not in text and "31536000" not in text and "command" not in text
    refused = api_error("VALIDATION_ERROR", "command: must be at most 64 KiB", {"field": "command"})
    assert name_script(refused, "train.sh", "x" * 70_000) == (
        "VALIDATION_ERROR: train.sh (68.4 KiB): must be at most 64 KiB"
    )
    # outside jpu submit, only what a job alone has: a workspace's `name` stays `name`
    other = api_error("VALIDATION_ERROR", "name: 1-64 characters", {"field": "name"})
    assert other == "VALIDATION_ERROR: name: 1-64 characters"
