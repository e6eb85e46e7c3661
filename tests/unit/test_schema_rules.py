"""The API's schema and its validators are one rule (SPEC §8, issue 27 item 2): a value the
published schema admits (checked by jsonschema_rs, the validator schemathesis checks with) is
accepted by the route's own check, and a value the check accepts is admitted by the schema. The
valid side is drawn from the schema's own patterns; the other side from text near the rule."""

from __future__ import annotations

import re
from typing import Any

import jsonschema_rs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jpu.backends import jobfiles
from jpu.domain.states import STATE_LIST_PATTERN, STATES
from jpu.policy import mail
from jpu_services.gateway.errors import ApiError
from jpu_services.gateway.routes.notifications import NotificationSettingsIn
from jpu_services.gateway.routes.queue import _states

NEAR = [
    "", " ", ",", "..", "a", "running", "Running", " END ", "end,fail", "NONE", "none,END",
    "END,", "END,,FAIL", "RUNNING,FAILED", "RUNNING, FAILED", "faıl", "ſ", "x\n", "END\n",
    "http://x", "HTTP://x.y:65535/p?q#f", "http://x:65536", "http://[::1]/", "ftp://x",
    "http://x/ a", "http://x/\x01", "a@b.c", "a@b.c\n", "a b@c.d", "@b.c", "a@b", "a/../b",
    "/a", "a/..", "..a", ".", "a//b", "\x12\u00b1", "a\x85@b.c", "a\ufeff@b.c", "a\x1c@b.c",
    "http://x/\x85", "http://x/\u3000", "END\x85", "\x1fEND",
]  # fmt: skip
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _python(pattern: str) -> str:
    """A schema pattern as Python reads JSON Schema's: a closing `$` is the end of the text."""
    return pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern


def _state_ok(value: str) -> bool:
    try:
        _states(value)
    except ApiError:
        return False
    return True


def _field(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = NotificationSettingsIn.model_json_schema()["properties"][name]
    return schema


def _body_ok(name: str, value: Any) -> bool:
    """What PUT /v1/me/notifications' checks (jpu.policy.mail) say of one field."""
    if name == "mail_type":
        return mail.parse_kinds(value)[1] is None
    if value is None or value == "":
        return True  # none
    check = mail.email_problem if name == "email" else mail.webhook_problem
    return check(value) is None


RULES: dict[str, tuple[dict[str, Any], Any]] = {
    "queue state": ({"type": "string", "pattern": STATE_LIST_PATTERN}, _state_ok),
    "files path": (
        {"type": "string", "pattern": jobfiles.PATH_PATTERN, "maxLength": jobfiles.MAX_PATH},
        lambda v: jobfiles.path_problem(v) is None,
    ),
    **{
        f"notifications {name}": (_field(name), lambda v, n=name: _body_ok(n, v))
        for name in ("email", "webhook_url", "mail_type")
    },
}
PATTERNS = {
    "queue state": [STATE_LIST_PATTERN],
    "files path": [jobfiles.PATH_PATTERN],
    "notifications email": [mail.EMAIL_PATTERN],
    "notifications webhook_url": [mail.WEBHOOK_PATTERN],
    "notifications mail_type": [o["pattern"] for o in mail.mail_type_schema()["anyOf"][2:]],
}


def _agree(name: str, value: Any) -> None:
    schema, accepted = RULES[name]
    admitted = jsonschema_rs.validator_for(schema).is_valid(value)
    # only mail_type takes a list; a query text or `str | None` field is refused as a list
    took = accepted(value) if isinstance(value, str) or name.endswith("mail_type") else False
    assert admitted == took, (name, value, admitted)


@pytest.mark.parametrize("name", sorted(RULES))
def test_SPEC8_the_schema_admits_what_the_check_accepts_near_the_rule(name: str) -> None:
    for value in [*NEAR, *STATES, ",".join(STATES), ["END", "FAIL"], ["NONE"], ["NONE", "END"]]:
        _agree(name, value)


@pytest.mark.parametrize("name", sorted(RULES))
@SETTINGS
@given(data=st.data())
def test_SPEC8_the_schema_admits_what_the_check_accepts_drawn(name: str, data: Any) -> None:
    pattern = data.draw(st.sampled_from(PATTERNS[name]))
    drawn = st.from_regex(re.compile(_python(pattern)))
    value = data.draw(drawn | st.text(max_size=40) | st.lists(drawn | st.text(), max_size=3))
    _agree(name, value)
