"""SPEC Q10: what a notification request may say — the kinds (`mail_type`), an e-mail address,
a webhook URL. Pure: the intake (per job), the gateway (per user) and the CLI's `#SBATCH`
directives all check through here, so a refusal names the same field the same way.
"""

from __future__ import annotations

import re
from typing import Any, Final
from urllib.parse import urlsplit

KINDS: Final = ("BEGIN", "END", "FAIL", "REQUEUE")  # REQUEUE: an OOM retry (X8)
# Slurm's modifier: an array's tasks notify one by one, not the array once (Q10); not in ALL
ARRAY_TASKS: Final = "ARRAY_TASKS"
ALIASES: Final = {"ALL": KINDS, "NONE": ()}
MAX_ADDRESS: Final = 254  # RFC 5321's longest forward path
MAX_URL: Final = 2048
# One address, no display name: what SMTP's RCPT TO takes (no spaces, one '@', a dotted domain).
# Controls and every space either regex dialect knows, spelled out: Python's `\s` and JSON
# Schema's differ (U+0085, U+001C-U+001F, U+FEFF), and the API's schema carries these patterns.
_NOT_TEXT: Final = (
    r"\u0000-\u0020\u007f-\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
EMAIL_PATTERN: Final = r"^[^@<>(),;:\"\[\]\\" + _NOT_TEXT + r"]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$"
_EMAIL_RE: Final = re.compile(EMAIL_PATTERN)
# An http(s) URL to a DNS name or IPv4 address, an optional port (0-65535), then anything but
# spaces and control characters: what urlsplit reads as a scheme, a host and a valid port.
_PORT: Final = (
    r"(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
)
WEBHOOK_PATTERN: Final = (
    r"^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9.-]+(?::" + _PORT + r")?(?:[/?#][^" + _NOT_TEXT + r"]*)?$"
)
_WEBHOOK_RE: Final = re.compile(WEBHOOK_PATTERN)
# Spaces and tabs around a kind are ignored: what a schema pattern spells alike in every regex
# dialect (Python's `\s` and JSON Schema's differ: U+0085, U+001C-U+001F).
_BLANKS: Final = " \t"
_PROBLEM_KINDS: Final = f"each of {', '.join(KINDS)}, ALL, {ARRAY_TASKS} or NONE"


def _any_case(word: str) -> str:
    return "".join(f"[{c}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)


def mail_type_schema() -> dict[str, Any]:
    """`parse_kinds`' rule as JSON Schema (SPEC §8: the schema says what is accepted): kinds in
    any case, spaces around each, a list or one comma-separated string, NONE only alone."""
    names = "|".join(_any_case(k) for k in (*KINDS, "ALL", ARRAY_TASKS))
    kind, none = rf"[ \t]*(?:{names})[ \t]*", rf"[ \t]*{_any_case('NONE')}[ \t]*"
    return {
        "anyOf": [
            {"type": "array", "items": {"type": "string", "pattern": f"^{kind}$"}},
            {
                "type": "array",
                "items": {"type": "string", "pattern": f"^{none}$"},
                "minItems": 1,
                "maxItems": 1,
            },
            {"type": "string", "pattern": f"^(?:{none}|{kind}(?:,{kind})*)$"},
        ]
    }


def parse_kinds(value: Any) -> tuple[list[str] | None, str | None]:
    """`value` (a list of names or one comma-separated string, like `--mail-type=END,FAIL`)
    → (the kinds in KINDS order, then ARRAY_TASKS if asked; None) or (None, why it is
    refused). NONE alone is []."""
    if isinstance(value, str):
        names = [n.strip(_BLANKS) for n in value.split(",")]
    elif isinstance(value, list) and all(isinstance(n, str) for n in value):
        names = [n.strip(_BLANKS) for n in value]
    else:
        return None, f"must be a list or a comma-separated string, {_PROBLEM_KINDS}"
    chosen: set[str] = set()
    for name in names:
        upper = name.upper() if name.isascii() else ""  # "faıl".upper() is FAIL: not a kind
        if upper in ALIASES:
            chosen.update(ALIASES[upper])
        elif upper in KINDS or upper == ARRAY_TASKS:
            chosen.add(upper)
        else:
            return None, f"unknown kind {name[:40]!r}: {_PROBLEM_KINDS}"
    if "NONE" in (n.upper() for n in names) and len(names) > 1:
        return None, "NONE cannot be combined with other kinds"
    return [k for k in (*KINDS, ARRAY_TASKS) if k in chosen], None


def email_problem(value: Any) -> str | None:
    """Why `value` is not one e-mail address we can send to, or None."""
    if not isinstance(value, str) or len(value) > MAX_ADDRESS or not _EMAIL_RE.fullmatch(value):
        return "must be one e-mail address (name@domain)"
    return None


def webhook_problem(value: Any) -> str | None:
    """Why `value` is not an http(s) URL to POST a Slack-compatible message to, or None."""
    if not isinstance(value, str) or len(value) > MAX_URL or any(c.isspace() for c in value):
        return f"must be an http:// or https:// URL of at most {MAX_URL} characters"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return "must be an http:// or https:// URL with a valid host and port"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http:// or https:// URL with a host"
    if not _WEBHOOK_RE.fullmatch(value):  # WEBHOOK_PATTERN, what the API's schema says
        return "must be an http:// or https:// URL to a DNS name or IPv4 address, no controls"
    return None
