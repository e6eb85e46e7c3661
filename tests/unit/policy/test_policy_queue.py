"""SPEC Q1 (validation), Q4/Q5 (promotion); the state sets: tests/unit/test_domain_decisions.py."""

import pytest

from jpu.domain.validation import validate_submit
from jpu.policy.queue import promotions

TIERS = ["rtx4090", "rtx3080ti"]
OK = {
    "num_gpus": 2,
    "command": "python train.py",
    "name": "run-1.a_b",
    "tiers": ["rtx4090"],
    "env": {"SEED": "1"},
}


def fields(body):
    return [e.field for e in validate_submit(body, TIERS)]


def test_Q1_valid_request_passes():
    assert validate_submit(OK, TIERS) == []
    assert validate_submit({"num_gpus": 1, "command": "x"}, TIERS) == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"num_gpus": 0}, "num_gpus"),
        ({"num_gpus": 9}, "num_gpus"),
        ({"num_gpus": True}, "num_gpus"),
        ({"num_gpus": "2"}, "num_gpus"),
        ({"num_gpus": 2.0}, "num_gpus"),
        ({"command": ""}, "command"),
        ({"command": "   \n"}, "command"),
        ({"command": "x" * (64 * 1024 + 1)}, "command"),
        ({"name": "a b"}, "name"),
        ({"name": "x" * 129}, "name"),
        ({"name": ""}, "name"),
        ({"tiers": ["h100"]}, "tiers"),
        ({"tiers": "rtx4090"}, "tiers"),
        ({"env": {"1BAD": "x"}}, "env.1BAD"),
        ({"env": {"JOB_ATTEMPT": "3"}}, "env.JOB_ATTEMPT"),
        ({"env": {"JOB_OUTPUT_DIR": "/"}}, "env.JOB_OUTPUT_DIR"),
        ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env.CUDA_VISIBLE_DEVICES"),
        ({"env": {"SLURM_JOB_ID": "1"}}, "env.SLURM_JOB_ID"),
        ({"env": {"A": 1}}, "env.A"),
        ({"env": {f"K{i}": "v" for i in range(65)}}, "env"),
        ({"env": ["A=1"]}, "env"),
        ({"min_vram_gb": 0}, "min_vram_gb"),
        ({"time_limit_s": -1}, "time_limit_s"),
    ],
)
def test_Q1_violations_name_the_field(change, field):
    assert fields(OK | change) == [field]


def test_Q1_exactly_64KiB_command_and_128_char_name_pass():
    assert fields(OK | {"command": "x" * 64 * 1024, "name": "n" * 128}) == []


def test_Q1_all_violations_reported():
    assert fields({"num_gpus": 0, "command": ""}) == ["num_gpus", "command"]


def test_Q5_promotion_oldest_first_while_under_limit():
    personal = {"alice": ["a1", "a2", "a3"], "bob": ["b1"], "carol": ["c1", "c2"]}
    slots = {"alice": 1, "bob": 3, "carol": 0}
    assert promotions(personal, slots, {"carol": 1}, default_limit=3) == ["a1", "a2", "c1"]


def test_Q5_promotion_nothing_when_at_or_over_limit():
    assert promotions({"u": ["x"]}, {"u": 5}, {}, 3) == []
    assert promotions({"u": []}, {}, {}, 3) == []


def test_Q1_unknown_field_is_rejected_with_the_field_probably_meant():
    (error,) = validate_submit(OK | {"tier": "rtx4090"}, TIERS)
    assert error.field == "tier"
    assert "did you mean 'tiers'?" in error.message
    assert fields(OK | {"priority": 9, "tier": "x"}) == ["priority", "tier"]
