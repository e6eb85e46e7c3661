"""A user's notification defaults (SPEC Q10): `GET/PUT /v1/me/notifications`.

The settings are an event on the log, `NotificationSettingsChanged` on the user's own subject
(`<prefix>.user.<name>`): the log is the record (E1), the notifier folds it like any event, and
the current settings are the subject's last message — no table to keep in step. A PUT replaces
them whole; refusals are 422 naming the field (jpu.policy.mail) and append nothing.

SPEC SEC4: a webhook URL naming a loopback, link-local, private or multicast address (literally,
as `localhost`, or once resolved) is refused here too (jpu.policy.outbound); the notifier checks
again at send time, so a name that resolves elsewhere later is still caught.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from jpu.bus import EventBus
from jpu.domain import limits
from jpu.events import NotificationSettingsChanged, decode, new_event_id
from jpu.policy import mail, outbound
from jpu_services.gateway.deps import CurrentUser, EdgesDep, SettingsDep
from jpu_services.gateway.errors import ApiError, responses
from jpu_services.gateway.routes._commands import append, now

router = APIRouter(prefix="/v1/me", tags=["users"])


def _blank_or(pattern: str, max_length: int) -> dict[str, Any]:
    """A field jpu.policy.mail checks, as the schema: null, "" (none), or `pattern` (^…$)."""
    text = {"type": "string", "maxLength": max_length, "pattern": f"^(?:{pattern[1:-1]})?$"}
    return {"anyOf": [text, {"type": "null"}]}


class NotificationSettingsIn(BaseModel):
    # Checked by jpu.policy.mail, so a refusal names its field; the schema says the same rules
    # (SPEC §8: a body the published schema allows is accepted)
    model_config = ConfigDict(extra="forbid")
    email: str | None = Field(
        None,
        description="where e-mail notifications go",
        json_schema_extra=_blank_or(mail.EMAIL_PATTERN, mail.MAX_ADDRESS),
    )
    webhook_url: str | None = Field(
        None,
        description='an http(s) URL a Slack-compatible `{"text": ...}` is POSTed to',
        json_schema_extra=_blank_or(mail.WEBHOOK_PATTERN, mail.MAX_URL),
    )
    mail_type: Any = Field(
        default_factory=list,
        description="the kinds for jobs that name none: BEGIN, END, FAIL, REQUEUE, ALL, "
        "ARRAY_TASKS, NONE (a list, or comma-separated like sbatch --mail-type)",
        json_schema_extra=mail.mail_type_schema(),
    )


class NotificationSettingsOut(BaseModel):
    user: str
    email: str | None
    webhook_url: str | None
    mail_type: list[str]
    seq: int  # the settings event's stream seq; 0: never set


def _out(user: str, e: NotificationSettingsChanged | None, seq: int) -> NotificationSettingsOut:
    if e is None:
        return NotificationSettingsOut(user=user, email=None, webhook_url=None, mail_type=[], seq=0)
    return NotificationSettingsOut(
        user=user, email=e.email, webhook_url=e.webhook_url, mail_type=e.mail_type, seq=seq
    )


async def _current(bus: EventBus, user: str) -> tuple[NotificationSettingsChanged | None, int]:
    msg = await bus.last_message(f"{bus.prefix}.user.{user}")
    if msg is None:
        return None, 0
    event = decode(msg.data or b"")
    return (event if isinstance(event, NotificationSettingsChanged) else None), int(msg.seq or 0)


@router.get("/notifications", responses=responses(401))
async def get_notifications(user: CurrentUser, edges: EdgesDep) -> NotificationSettingsOut:
    """Your notification defaults (SPEC Q10); empty until you set them."""
    event, seq = await _current(edges.bus, user.name)
    return _out(user.name, event, seq)


@router.put("/notifications", responses=responses(400, 401, 422))
async def put_notifications(
    request: Request,
    body: NotificationSettingsIn,
    user: CurrentUser,
    edges: EdgesDep,
    settings: SettingsDep,
) -> NotificationSettingsOut:
    """Replace your notification defaults (SPEC Q10): an e-mail address and/or a webhook URL,
    and the kinds sent for jobs that do not name their own `mail_type`."""
    problems = _problems(body)
    if not problems and body.webhook_url:
        allow = outbound.parse_networks(settings.base.webhook_allow_networks)
        if why := await _webhook_refused(body.webhook_url, allow):
            problems.append(limits.FieldError("webhook_url", why))
    if problems:
        raise ApiError(422, "VALIDATION_ERROR", *limits.error_details(problems))
    kinds, _ = mail.parse_kinds(body.mail_type)
    event = NotificationSettingsChanged(
        event_id=new_event_id(), ts=now(request), user=user.name, email=body.email or None,
        webhook_url=body.webhook_url or None, mail_type=kinds or [],
    )  # fmt: skip
    seq = await append(edges, event)  # by intake (SPEC SEC2)
    return _out(user.name, event, seq)


def _problems(body: NotificationSettingsIn) -> list[limits.FieldError]:
    problems: list[limits.FieldError] = []
    raw: dict[str, Any] = body.model_dump()
    problems += limits.json_problems(raw)
    if problems:
        return problems
    if body.email and (why := mail.email_problem(body.email)):
        problems.append(limits.FieldError("email", why))
    if body.webhook_url and (why := mail.webhook_problem(body.webhook_url)):
        problems.append(limits.FieldError("webhook_url", why))
    if why := mail.parse_kinds(body.mail_type)[1]:
        problems.append(limits.FieldError("mail_type", why))
    return problems


LOOKUP_TIMEOUT_S = 2.0  # a slow resolver must not hold the PUT; the send-time check remains


async def _webhook_refused(url: str, allow: list[outbound.IPNetwork]) -> str | None:
    """SPEC SEC4 at PUT: the URL without DNS, then what its name resolves to now. A name that
    does not resolve (yet) is accepted: the notifier resolves and checks it at each send."""
    if why := outbound.url_problem(url, allow):
        return why
    parts = outbound.split(url)
    if parts is None or not outbound.needs_lookup(url):
        return None
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError, TimeoutError):
        infos = await asyncio.wait_for(
            loop.getaddrinfo(parts.hostname, parts.port or 443, type=socket.SOCK_STREAM),
            LOOKUP_TIMEOUT_S,
        )
        addresses = [outbound.literal_address(str(info[4][0])) for info in infos]
        return outbound.addresses_problem([a for a in addresses if a is not None], allow)
    return None
