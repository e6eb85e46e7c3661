"""The one rule for tests that need an optional outside thing (jpu.testing.unavailable,
docs/testing.md): missing, it is a skip with the reason; with JPU_TEST_<NAME>_REQUIRED=1 (CI)
it is a failure naming that variable."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from jpu.testing.unavailable import needs_root, required, skip_or_fail, skip_unless_required

ROOT = Path(__file__).resolve().parents[2]
WHY = "no prometheus binary (run scripts/install-prometheus)"


def test_missing_and_not_required_is_a_skip_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for value in (None, "0", ""):
        if value is None:
            monkeypatch.delenv("JPU_TEST_PROMETHEUS_REQUIRED", raising=False)
        else:
            monkeypatch.setenv("JPU_TEST_PROMETHEUS_REQUIRED", value)
        assert not required("prometheus")
        with pytest.raises(pytest.skip.Exception) as skipped:
            skip_unless_required("prometheus", WHY)
        assert skipped.value.msg == WHY


def test_missing_and_required_is_a_failure_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JPU_TEST_PROMETHEUS_REQUIRED", "1")
    assert required("prometheus")
    with pytest.raises(pytest.fail.Exception) as failed:
        skip_unless_required("prometheus", WHY)
    assert failed.value.msg == f"JPU_TEST_PROMETHEUS_REQUIRED=1 but {WHY}"
    assert not failed.value.pytrace  # the message says it all


def test_another_setting_can_make_it_required() -> None:
    why = "no container engine answers"
    with pytest.raises(pytest.fail.Exception) as failed:
        skip_or_fail(why, "JPU_TEST_CLUSTER_SERVERS=containers")
    assert failed.value.msg == f"JPU_TEST_CLUSTER_SERVERS=containers but {why}"
    with pytest.raises(pytest.skip.Exception) as skipped:
        skip_or_fail(why, None)
    assert skipped.value.msg == why


def test_root_is_required_the_same_way(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("JPU_TEST_ROOT_REQUIRED", "1")
    assert needs_root("creates Unix accounts") is None  # as root there is nothing to say
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(pytest.fail.Exception) as failed:
        needs_root("creates Unix accounts")
    assert failed.value.msg == (
        "JPU_TEST_ROOT_REQUIRED=1 but needs root (creates Unix accounts) and runs as uid 1000"
    )
    monkeypatch.delenv("JPU_TEST_ROOT_REQUIRED")
    with pytest.raises(pytest.skip.Exception, match=r"^needs root \(creates Unix accounts\)"):
        needs_root("creates Unix accounts")


def test_ci_requires_every_name_the_tests_use() -> None:
    """A mis-spelt name would be skipped on CI too: every name passed to the helper is one
    `.ci/run` requires or names, with its reason, as not installable there; every one it
    requires is used."""
    used = {"root"}  # needs_root
    for path in [*(ROOT / "libs").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]:
        if path.name != "test_unavailable.py":
            used |= set(re.findall(r'skip_unless_required\(\s*"(\w+)"', path.read_text()))
    ci = (ROOT / ".ci" / "run").read_text()
    exported = set(re.findall(r"^export JPU_TEST_(\w+)_REQUIRED=1", ci, re.MULTILINE))
    comments = "\n".join(line for line in ci.splitlines() if line.startswith("#"))
    declined = set(re.findall(r"JPU_TEST_(\w+)_REQUIRED \(", comments))  # "NAME (reason)"
    assert not exported & declined, exported & declined
    assert {name.upper() for name in used} == exported | declined
