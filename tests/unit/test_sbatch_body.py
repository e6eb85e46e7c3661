"""SPEC U6, Q1: a submit's `sbatch` (the options as the user gave them) has one shape, said by
the published schema and checked by intake (jpu.domain.limits.sbatch_problem): the two agree on
what they admit, and intake decides from it alone (jpu.domain.submission.with_sbatch)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from jpu.commands import SubmitCommand
from jpu.domain import limits
from jpu.domain.submission import with_sbatch
from jpu.testing.sbatch import default_site

SCHEMA = limits.submit_schema()["properties"]["sbatch"]
LONG = "x" * (limits.MAX_SBATCH_VALUE + 1)
OK = {"option": "--qos", "value": "high", "source_line": "run.sh:3: #SBATCH --qos=high"}

CASES: list[tuple[Any, bool]] = [
    ({"source": "run.sh", "options": [OK]}, True),
    ({"options": [{"option": "--hold"}]}, True),
    ({"options": [{"option": "--hold", "value": None, "source_line": None}]}, True),
    ({"source": None, "options": None}, True),
    ({}, True),
    ({"options": [OK] * limits.MAX_SBATCH_OPTIONS}, True),
    ({"options": [OK] * (limits.MAX_SBATCH_OPTIONS + 1)}, False),
    ({"options": [{"value": "high"}]}, False),  # no option
    ({"options": [{"option": ""}]}, False),
    ({"options": [{"option": "--qos", "line": 3}]}, False),  # a key it does not know
    ({"options": [{"option": "--qos", "value": 3}]}, False),
    ({"options": [{"option": "--qos", "value": LONG}]}, False),
    ({"options": ["--qos=high"]}, False),
    ({"source": ""}, False),
    ({"lines": []}, False),
    ([OK], False),
]


@pytest.mark.parametrize(("value", "valid"), CASES)
def test_U6_Q1_the_schema_and_intakes_check_agree_on_sbatch(value: Any, valid: bool) -> None:
    by_schema = jsonschema.Draft202012Validator(SCHEMA).is_valid(value)
    assert (by_schema, limits.sbatch_problem(value) is None) == (valid, valid)


def test_U6_what_no_store_can_hold_is_refused_naming_the_place() -> None:
    why = limits.sbatch_problem({"options": [{"option": "--qos", "value": "a\x00b"}]})
    assert why is not None and why.startswith("sbatch.options[0].value: must not contain a NUL")


def test_U6_intake_decides_from_the_options_never_from_the_bodys_warnings() -> None:
    body = {"command": "run", "num_gpus": 1, "sbatch": {"options": [OK]}}
    cmd, decided = with_sbatch(SubmitCommand(user="alice", lab="BCG", body=body), default_site())
    assert "sbatch" not in cmd.body  # decided: the job's fields carry what it meant
    assert decided.refusal is None and decided.warnings == [
        "run.sh:3: #SBATCH --qos=high: accepted and ignored: no QOS here: jobs are ordered by "
        "their lab's fair-share (SPEC D1)"
    ]
    assert decided.said() == [{"field": "sbatch", "message": decided.warnings[0]}]
    plain = {"command": "run", "num_gpus": 1}  # no options: nothing to decide, nothing said
    assert with_sbatch(SubmitCommand(user="alice", lab="BCG", body=plain), default_site())[1] == (
        type(decided)()
    )
