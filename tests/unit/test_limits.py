"""jpu.domain.limits: one definition of what every store can hold (SPEC Q1), and
the OpenAPI schema built from it says exactly what Q1 validation accepts."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from jpu.domain import limits
from jpu.domain.validation import validate_submit

TIERS = ["rtx4090", "rtx3080ti"]
OK = {"num_gpus": 1, "command": "python train.py"}


def fields(body: dict) -> list[str]:
    return [e.field for e in validate_submit(body, TIERS)]


@pytest.mark.parametrize(
    ("text", "bad"),
    [("plain", False), ("é🚀日本", False), ("a\x00b", True), ("\ud800", True), ("x\udfffy", True)],
)
def test_Q1_text_is_storable_without_nul_or_unpaired_surrogates(text: str, bad: bool) -> None:
    assert (limits.text_problem(text) is not None) == bad
    assert limits.printable(text).encode("utf-8")  # an error message can always echo it


def test_Q1_json_problems_name_every_place_by_its_path() -> None:
    body = {
        "command": "a\x00",
        "env": {"A": "\ud800", "B\x00": "x"},
        "tiers": ["ok", "n\x00"],
        "time_limit_s": math.inf,
        "min_vram_gb": 2**63,
        "x": math.nan,
    }
    assert [p.field for p in limits.json_problems(body)] == [
        "command",
        "env.A",
        "env.B\\x00",
        "tiers[1]",
        "time_limit_s",
        "min_vram_gb",
        "x",
    ]


def test_A_json_problems_walk_any_depth_without_recursion() -> None:
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    (problem,) = limits.json_problems({"env": deep})
    assert problem.field == "env" + "[0]" * (limits.MAX_JSON_DEPTH - 1)
    assert "nested deeper" in problem.message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"command": "echo \x00"}, "command"),
        ({"env": {"A": "v\x00"}}, "env.A"),
        ({"time_limit_s": 1e10}, "time_limit_s"),
        ({"time_limit_s": 2**31}, "time_limit_s"),
        ({"time_limit_s": math.inf}, "time_limit_s"),
        ({"time_limit_s": math.nan}, "time_limit_s"),
        ({"min_vram_gb": 2**31}, "min_vram_gb"),
        ({"num_gpus": 2**63}, "num_gpus"),
        ({"tiers": []}, "tiers"),
        ({"env": {"A": "v" * (limits.MAX_ENV_VALUE_BYTES + 1)}}, "env.A"),
        ({"command": "\u3000\ufeff"}, "command"),  # blank as JSON Schema's \s sees it
    ],
)
def test_Q1_what_no_store_can_hold_is_refused_naming_the_field(change: dict, field: str) -> None:
    assert fields(OK | change) == [field]


def test_Q1_the_documented_maxima_are_accepted() -> None:
    edge = {
        "time_limit_s": limits.MAX_TIME_LIMIT_S,
        "min_vram_gb": limits.MAX_MIN_VRAM_GB,
        "env": {"A": "v" * limits.MAX_ENV_VALUE_BYTES},
        "command": "é" * (limits.MAX_COMMAND_BYTES // 2),
    }
    assert fields(OK | edge) == []
    assert limits.MAX_TIME_LIMIT_S <= limits.INT32_MAX  # the jobs.time_limit_s column


def test_Q6_idempotency_key_bounds() -> None:
    assert limits.idempotency_key_problem(None) is None
    assert limits.idempotency_key_problem("k" * limits.MAX_IDEMPOTENCY_KEY) is None
    for bad in ("", "k" * (limits.MAX_IDEMPOTENCY_KEY + 1), "a\x00"):
        assert limits.idempotency_key_problem(bad) is not None


@pytest.mark.parametrize(
    ("kind", "name", "ok"),
    [
        ("lab", "BCG", True),
        ("lab", "lab.with.dots", False),  # a NATS subject token: jpu.lab.<lab>
        ("lab", "a b", False),
        ("lab", "*", False),
        ("lab", "", False),
        ("user", "bcg-alice.2", True),
        ("user", "a\x00", False),
        ("user", "\udcff", False),  # an argv byte that was not UTF-8
        ("user", "u" * 65, False),
    ],
)
def test_admin_lab_and_user_names(kind: str, name: str, ok: bool) -> None:
    assert (limits.name_problem(kind, name) is None) == ok


# --- the OpenAPI schema and Q1 are one truth ---------------------------------------------

SCHEMA = limits.submit_schema(TIERS)["properties"]


def _matches(prop: dict, value: str) -> bool:
    # ECMA-262 in the document: its `$` is the end of the input, where Python's also matches
    # before a final newline ("0\n" was found to "match" here while the API rejects it)
    pattern = (
        prop["pattern"].removesuffix("$") + r"\Z"
        if prop["pattern"].endswith("$")
        else prop["pattern"]
    )
    return bool(re.search(pattern, value)) and prop.get("minLength", 0) <= len(value) <= prop.get(
        "maxLength", math.inf
    )


@given(st.text(max_size=40))
def test_Q1_schema_and_validation_agree_on_command(command: str) -> None:
    accepted = "command" not in fields(OK | {"command": command})
    assert accepted == _matches(SCHEMA["command"], command)


@given(
    st.text(alphabet=st.characters(codec="utf-8"), max_size=20) | st.sampled_from(["a", "a.b-c_9"])
)
@example("0\n")  # found in CI: a final newline (ECMA's `$` vs Python's)
def test_Q1_schema_and_validation_agree_on_name(name: str) -> None:
    accepted = "name" not in fields(OK | {"name": name})
    assert accepted == _matches(SCHEMA["name"], name)


@given(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True) | st.text(max_size=8))
def test_Q1_schema_and_validation_agree_on_env_keys(key: str) -> None:
    names = SCHEMA["env"]["propertyNames"]
    reserved = key in names["not"]["anyOf"][0]["enum"] or re.search(
        names["not"]["anyOf"][1]["pattern"], key
    )
    in_schema = bool(re.search(names["pattern"], key)) and not reserved
    accepted = not [f for f in fields(OK | {"env": {key: "v"}}) if f.startswith("env")]
    assert accepted == in_schema
