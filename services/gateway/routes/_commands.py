"""Forwarding commands to intake over NATS request/reply (SPEC E4), and read-your-writes.

The gateway authenticates and shape-checks; intake decides (Q1–Q3, Q6, cancel rules) and answers
with a `CommandReply` carrying the stream sequence of the event it appended. Before answering the
client, the gateway waits until the jobs projection has applied that sequence, so the job body it
returns (and any GET right after) already shows the command's effect.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

import nats.errors
from fastapi import Request

from jpu import commands
from jpu.edges import Edges
from jpu.store.positions import PositionWatch
from jpu.store.projection import wait_applied
from jpu_services.gateway.errors import ApiError

log = logging.getLogger("jpu.gateway.commands")

COMMAND_TIMEOUT_S: Final = 5.0  # intake answers in milliseconds; 5 s means it is not there
READ_YOUR_WRITES_TIMEOUT_S: Final = 5.0
MAX_BODY_BYTES: Final = 512 * 1024  # well above Q1's 64 KiB command; under NATS' 1 MiB payload


def now(request: Request) -> float:
    """The gateway's clock (SPEC E1: injectable; tests may put a FakeClock on app.state)."""
    clock = getattr(request.app.state, "clock", None)
    return float(clock.now()) if clock is not None else time.time()


async def send(
    edges: Edges, subject: str, cmd: commands.Command, timeout_s: float = COMMAND_TIMEOUT_S
) -> commands.CommandReply:
    """Request/reply to intake; no intake or no answer → 503 INTAKE_UNAVAILABLE."""
    try:
        msg = await edges.bus.nc.request(subject, commands.encode(cmd), timeout=timeout_s)
    except nats.errors.NoRespondersError as e:
        raise _unavailable("no intake service is running") from e
    except (nats.errors.TimeoutError, TimeoutError) as e:
        raise _unavailable(f"intake did not answer within {timeout_s:g} s") from e
    reply = commands.decode_reply(msg.data)
    if reply.error is not None:
        err = reply.error
        raise ApiError(reply.status, err.code, err.message, dict(err.details))
    return reply


def _unavailable(message: str) -> ApiError:
    return ApiError(
        503, "INTAKE_UNAVAILABLE", message + "; try again shortly", headers={"Retry-After": "2"}
    )


async def caught_up(
    edges: Edges, seq: int | None, projection: str = "jobs", request: Request | None = None
) -> bool:
    """Read-your-writes: True once `projection` applied `seq`; False (logged) on timeout.
    Woken by the projection's NOTIFY when the app has a PositionWatch, else polls."""
    if not seq:
        return True
    watch: PositionWatch | None = (
        getattr(request.app.state, "positions", None) if request is not None else None
    )
    try:
        if watch is not None:
            await watch.wait(edges.pool, projection, seq, timeout=READ_YOUR_WRITES_TIMEOUT_S)
        else:
            await wait_applied(edges.pool, projection, seq, timeout=READ_YOUR_WRITES_TIMEOUT_S)
    except TimeoutError:
        log.warning("projection lag", extra={"projection": projection, "seq": seq})
        return False
    return True


def shape_error(field: str, message: str, **details: Any) -> ApiError:
    return ApiError(422, "VALIDATION_ERROR", message, {"field": field, **details})
