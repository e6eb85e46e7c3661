"""SPEC F5, §8: a lab's charges explained are for the lab's members and admins (pure parts: the
access rule, and `jpu usage --explain` rendering the API's body with jpu-admin's table; the
live route in tests/integration/test_api_explain.py)."""

from __future__ import annotations

import msgspec
import pytest

from jpu.cli.rest import views as rest_views
from jpu.explain.usage import ChargeLine, Held, UsageExplanation
from jpu.store.auth import Principal
from jpu.tools.admin_usage import render_explanation


@pytest.mark.parametrize(
    ("name", "lab", "role", "sees_bcg"),
    [
        ("bcg-bob", "BCG", "user", True),  # a member, whatever jobs they own
        ("bcg-lead", "BCG", "lab_admin", True),
        ("kdg-carol", "KDG", "user", False),
        ("kdg-lead", "KDG", "lab_admin", False),  # another lab's lab_admin
        ("root", "KDG", "admin", True),  # admins: every lab
    ],
)
def test_F5_lab_charges_are_for_its_members_and_admins(
    name: str, lab: str, role: str, sees_bcg: bool
) -> None:
    who = Principal(name, lab, role, None)  # type: ignore[arg-type]
    assert who.may_see_lab("BCG") is sees_bcg
    assert who.may_see_lab(lab)


def test_F5_jpu_usage_explain_prints_the_admin_table_from_the_api_body() -> None:
    held = [Held("reservation", "rtx4090", 300.0, 82.6)]
    line = ChargeLine(
        seq=7, charge_id="chg-1", lab="BCG", reason="demoted", kind="reservation", job_id="job-x",
        attempt=1, user="bcg-alice", at=100.0, amount=24_780.0, held=held, value_after=48_780.0,
        decay=1.0, value_now=24_780.0,
    )  # fmt: skip
    x = UsageExplanation(
        lab="BCG", at=100.0, half_life_s=604800.0, since=None, until=None, charges=[line],
        listed_amount=24_780.0, listed_value=24_780.0, total_value=24_780.0, usage=24_780.0,
        raw_value=24_780.0, as_of=100.0,
    )  # fmt: skip
    body = msgspec.json.decode(msgspec.json.encode(x))  # as the CLI receives it
    text = rest_views.usage_explanation(body)
    assert text == render_explanation(x)
    assert "reservation (R3, at release)" in text and "job-x" in text
