"""Parking: a message a consumer cannot process goes to the DLQ stream, never dropped (SPEC O5).

The parked copy keeps the original bytes and says why, where from and which consumer gave up.
Its Nats-Msg-Id (`<durable>:<seq>`) makes parking twice (a lost term) harmless.
"""

from __future__ import annotations

import contextlib
import logging

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from jpu.bus.model import (
    H_MSG_ID,
    H_PARK_DURABLE,
    H_PARK_REASON,
    H_PARK_SEQ,
    H_PARK_SUBJECT,
    ParkedMessage,
)
from jpu.bus.reader import read_range

log = logging.getLogger(__name__)


def dlq_subject(prefix: str, durable: str) -> str:
    return f"{prefix}_dlq.{durable}"


async def park(js: JetStreamContext, msg: Msg, *, prefix: str, durable: str, reason: str) -> None:
    """Copy `msg` to the DLQ, then terminate it on the consumer so it is not redelivered."""
    seq = msg.metadata.sequence.stream
    headers = {
        H_PARK_REASON: reason[:1000],
        H_PARK_SEQ: str(seq),
        H_PARK_SUBJECT: msg.subject,
        H_PARK_DURABLE: durable,
        H_MSG_ID: f"{durable}:{seq}",
    }
    await js.publish(dlq_subject(prefix, durable), msg.data, headers=headers)
    await msg.term()
    log.warning("parked seq=%d subject=%s durable=%s: %s", seq, msg.subject, durable, reason)


def to_parked(msg: Msg) -> ParkedMessage:
    h = msg.headers or {}
    return ParkedMessage(
        seq=int(h.get(H_PARK_SEQ, "0")),
        subject=h.get(H_PARK_SUBJECT, ""),
        reason=h.get(H_PARK_REASON, ""),
        durable=h.get(H_PARK_DURABLE, ""),
        data=bytes(msg.data),
    )


async def read_parked(
    js: JetStreamContext, dlq_stream: str, prefix: str, limit: int
) -> list[ParkedMessage]:
    out: list[ParkedMessage] = []
    async with contextlib.aclosing(read_range(js, dlq_stream, f"{prefix}_dlq.>")) as msgs:
        async for msg in msgs:
            out.append(to_parked(msg))
            if len(out) >= limit:
                break
    return out
