"""What the bus hands to its callers, and the header names it writes."""

from __future__ import annotations

from typing import Final

import msgspec

from jpu.events import Delivered as Delivered  # the bus hands logged events out as these

# Headers on parked (DLQ) messages.
H_PARK_REASON: Final = "Jpu-Park-Reason"
H_PARK_SEQ: Final = "Jpu-Original-Seq"
H_PARK_SUBJECT: Final = "Jpu-Original-Subject"
H_PARK_DURABLE: Final = "Jpu-Durable"
H_MSG_ID: Final = "Nats-Msg-Id"
H_EXPECTED_LAST_SUBJECT_SEQ: Final = "Nats-Expected-Last-Subject-Sequence"


class ParkedMessage(msgspec.Struct, frozen=True):
    """A message a durable consumer parked on the DLQ instead of dropping it (SPEC O5)."""

    seq: int  # stream sequence of the original message
    subject: str  # its original subject
    reason: str
    durable: str
    data: bytes
