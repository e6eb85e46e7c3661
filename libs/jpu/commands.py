"""Commands the gateway sends to intake over NATS request/reply, and intake's reply (SPEC E4, §8).

Commands are imperative (`SubmitCommand`), events past tense (`JobSubmitted`). The gateway
authenticates the caller and forwards the raw JSON body untouched; intake validates it (Q1–Q3), so
every 422 names the offending field in one place.

Wire: request on `<prefix>_cmd.submit` / `<prefix>_cmd.cancel` (msgspec JSON), intake answers
with a `CommandReply`. Intake replicas share the queue group `intake`. The subjects are outside
`<prefix>.>` on purpose: the event stream captures `<prefix>.>`, and a request captured by
JetStream would be answered by the stream's PubAck instead of by intake.

    reply = decode_reply(await nc.request(submit_subject(prefix), encode(cmd), timeout=5))
    if reply.error:
        raise ApiError(reply.status, reply.error.code, reply.error.message, reply.error.details)
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from jpu.domain.states import JobView
from jpu.events import (
    JobSubmitted,
    NotificationSettingsChanged,
    WorkspaceBuildRequested,
    WorkspaceDefaultChanged,
    WorkspaceDeleted,
)

QUEUE_GROUP: Final = "intake"

# SPEC §8 error codes intake can answer with, and their HTTP status.
STATUS: Final[dict[str, int]] = {
    "VALIDATION_ERROR": 422,
    "NO_FIT_PLACEMENT": 422,
    "SERVICE_MAINTENANCE": 503,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "ALREADY_TERMINAL": 409,
    "NOT_IN_PERSONAL_QUEUE": 409,  # Q9: only a personal-queue job is held or released
    "IDEMPOTENCY_CONFLICT": 409,
    "CONFLICT": 409,  # an AppendCommand's expected last subject sequence moved on (E2)
    "ALREADY_IN_MAINTENANCE": 409,  # M1/M4: a MaintenanceCommand
    "NOT_IN_MAINTENANCE": 409,
    "BAD_REQUEST": 400,
    "INTERNAL": 500,
}


class SubmitCommand(msgspec.Struct, frozen=True, kw_only=True, tag="SubmitJob"):
    """Submit a job for `user` of `lab` (already authenticated by the gateway)."""

    user: str
    lab: str
    body: dict[str, Any]  # the POST /v1/jobs JSON body as received (validated by intake, Q1)
    idempotency_key: str | None = None  # the Idempotency-Key header (Q6)
    max_active_jobs: int | None = None  # the user's own limit if the gateway knows it (S1)


class CancelCommand(msgspec.Struct, frozen=True, kw_only=True, tag="CancelJob"):
    """Cancel `job_id` on behalf of `by` (role / lab used to re-check who may cancel)."""

    job_id: str
    by: str
    role: str = "user"  # user | lab_admin | admin
    lab: str | None = None


class HoldCommand(msgspec.Struct, frozen=True, kw_only=True, tag="HoldJob"):
    """Hold (`hold=True`) or release a personal-queue job on behalf of `by` (SPEC Q9)."""

    job_id: str
    by: str
    hold: bool
    role: str = "user"  # user | lab_admin | admin
    lab: str | None = None


# The events the gateway decides on behalf of an authenticated caller (a user's settings and
# workspaces). SPEC SEC2: the gateway publishes no event; intake
# owns these types and appends them for it, so the gateway's NATS identity holds commands only.
GatewayEvent = (
    NotificationSettingsChanged
    | WorkspaceBuildRequested
    | WorkspaceDeleted
    | WorkspaceDefaultChanged
)


class AppendCommand(msgspec.Struct, frozen=True, kw_only=True, tag="AppendEvent"):
    """Append `event` (one of GatewayEvent, nothing else decodes), with the subject's expected
    last sequence when given (SPEC E2: a conflict answers 409 CONFLICT, the gateway decides
    again). Intake answers with the event's stream sequence."""

    event: GatewayEvent
    expected_last_subject_seq: int | None = None


class MaintenanceCommand(msgspec.Struct, frozen=True, kw_only=True, tag="Maintenance"):
    """An admin's `start` / `end` of maintenance (SPEC M1/M4), decided by intake."""

    action: str
    by: str
    message: str = ""
    ts: float | None = (
        None  # the gateway's clock (the event's time, as the request's); None: intake's
    )


class CommandError(msgspec.Struct, frozen=True, kw_only=True):
    code: str  # SPEC §8 error code
    message: str
    details: dict[str, Any] = {}


class CommandReply(msgspec.Struct, frozen=True, kw_only=True):
    """Success: `job_id`, `seq` (stream sequence of the event that answered), `replayed` (Q6).

    `status` is the HTTP status the gateway should answer with (201 created, 200 idempotent
    replay, 202 cancel accepted, or the error's status)."""

    status: int
    job_id: str | None = None
    seq: int | None = None
    replayed: bool = False
    state: str | None = None  # the job state after the command (e.g. PERSONAL_QUEUE_WAIT)
    error: CommandError | None = None
    # U5/U6: accepted, with a chdir the job cannot write, or sbatch options warned about (one
    # sentence each, `field` saying whose)
    warnings: list[dict[str, Any]] = []
    # A single job accepted (201): the event appended and the job as intake's fold holds it
    # after the submit's promotion round, with its D7 reason while in the personal queue; the
    # gateway answers from these without waiting for a projection.
    submitted: JobSubmitted | None = None
    job: JobView | None = None
    pending_reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


Command = SubmitCommand | CancelCommand | HoldCommand | AppendCommand | MaintenanceCommand

_encoder: Final = msgspec.json.Encoder()
_command_decoder: Final = msgspec.json.Decoder(Command)
_reply_decoder: Final = msgspec.json.Decoder(CommandReply)


def submit_subject(prefix: str = "jpu") -> str:
    return f"{prefix}_cmd.submit"


def cancel_subject(prefix: str = "jpu") -> str:
    return f"{prefix}_cmd.cancel"


def hold_subject(prefix: str = "jpu") -> str:
    return f"{prefix}_cmd.hold"


def maintenance_subject(prefix: str = "jpu") -> str:
    return f"{prefix}_cmd.maintenance"


def append_subject(prefix: str = "jpu") -> str:
    return f"{prefix}_cmd.append"


def encode(msg: Command | CommandReply) -> bytes:
    return _encoder.encode(msg)


def decode_command(data: bytes) -> Command:
    return _command_decoder.decode(data)


def decode_reply(data: bytes) -> CommandReply:
    return _reply_decoder.decode(data)


def error_reply(code: str, message: str, details: dict[str, Any] | None = None) -> CommandReply:
    return CommandReply(
        status=STATUS.get(code, 400),
        error=CommandError(code=code, message=message, details=details or {}),
    )


# --- the dispatcher's last decision, for the API's rank and pending reason (SPEC D1, D7) -----

VIEWS_BUCKET: Final = "jpu_views"  # NATS KV bucket; keys `queue.<stream>`, `estimates.<stream>`


class QueueView(msgspec.Struct, frozen=True, kw_only=True):
    """Written by the leading dispatcher after each cycle whose outcome changed.

    `order` = job ids by rank (rank 1 first) at `at`; `pending` = job id → D7 reason
    (Priority | Resources | MinVram | Reservation | Maintenance); `seq` = last stream seq it saw.
    Personal-queue jobs are not in it: their reason is ConcurrencyLimit."""

    at: float
    seq: int
    order: list[str]
    pending: dict[str, str]


def queue_view_key(stream: str) -> str:
    return f"queue.{stream}"


_view_decoder: Final = msgspec.json.Decoder(QueueView)


def encode_view(view: QueueView) -> bytes:
    return _encoder.encode(view)


def decode_view(data: bytes) -> QueueView:
    return _view_decoder.decode(data)


class EstimatesView(msgspec.Struct, frozen=True, kw_only=True):
    """Written by the leading dispatcher every `estimate_every_s` (SPEC U4): the forward estimate
    of when each queued job starts (jpu.explain.estimate), computed on its state at `at` (stream seq
    `seq`). `jobs` = job id → [estimated start (null: unknown), basis: limits | predicted |
    unknown]. `complete` = every job got a start within the horizon and the cycle cap.
    `why` = why a start is unknown → the jobs it is unknown for (each reason once: in
    maintenance every job has the same one; absent in older values)."""

    at: float
    seq: int
    jobs: dict[str, tuple[float | None, str]]
    complete: bool = True
    why: dict[str, list[str]] = {}


def estimates_view_key(stream: str) -> str:
    return f"estimates.{stream}"


_estimates_decoder: Final = msgspec.json.Decoder(EstimatesView)


def encode_estimates(view: EstimatesView) -> bytes:
    return _encoder.encode(view)


def decode_estimates(data: bytes) -> EstimatesView:
    return _estimates_decoder.decode(data)
