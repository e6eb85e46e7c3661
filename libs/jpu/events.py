"""Every fact JPU-Share records, as immutable msgspec structs (SPEC E1).

Evolution rules (checked by tests/unit/test_schemas.py against proto-schemas/):
  * a tag (the `type` on the wire) never changes, even when a class is renamed;
  * a field's type never changes (an enum may only gain values); a new field must have a
    default;
  * `schema_version` is bumped when a struct gains fields.
Times (`ts`, `as_of`, `since`, ...) are seconds from the service's injectable clock.
"""

from __future__ import annotations

import uuid
from typing import Final, Literal

import msgspec

SCHEMA_VERSION: Final = 1


class Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    """Base of every event: `type` (the tag), `event_id`, `ts`, `schema_version`."""

    event_id: str
    ts: float
    schema_version: int = SCHEMA_VERSION


class JobEvent(Event, frozen=True, kw_only=True):
    job_id: str


# --- submission and queue (SPEC §2) ---------------------------------------------------------


class JobArray(msgspec.Struct, frozen=True, kw_only=True):
    """SPEC Q7: the tasks of a job array. On the array's submit (its own subject): every task
    index and the `%N` throttle; each task is then a job of its own, `<array id>_<index>`,
    derived by the fold (jpu.domain.arrays.tasks_of), never appended. On such a derived task
    submit `tasks` is its one index and `array_id` names the array."""

    tasks: list[int]
    throttle: int | None = None  # %N: at most N tasks of the array hold slots at once (S1)
    spec: str = ""  # as the user wrote it, e.g. "0-99%8" (for display)
    array_id: str | None = None  # set on a task's derived submit only


class JobSubmitted(JobEvent, frozen=True, kw_only=True, tag="JobSubmitted"):
    """A job accepted by intake (SPEC Q4). v2 added `chdir`: the absolute directory the job
    runs in (U5); null or absent: its attempt's JOB_OUTPUT_DIR, as every v1 job ran. v3 added
    `mail_type` / `mail_user` (Q10: the job's own notification kinds and e-mail address; null:
    the user's defaults, NotificationSettingsChanged), `dependency` (Q8, Slurm syntax as
    jpu.domain.dependencies normalises it; null: none), `hold` (Q9: submitted held), `workspace`
    (the name asked for) and `workspace_image` (the image of the READY workspace it resolved to at
    submit, X4a: a later rebuild does not change what the job runs in); absent: as every v2 job
    (no dependency, not held, the base image); `array` (Q7): absent, a single job; else the
    one event that creates every task. v4 added `output`, `error`, `open_mode`, `signal`
    (U6: sbatch's -o/-e/--open-mode/--signal as written; jpu.domain.slurm_io gives their
    meaning at execution); absent: none, as every v3 job."""

    schema_version: int = 4
    lab: str
    user: str
    name: str
    command: str
    num_gpus: int
    tiers: list[str] | None = None
    min_vram_gb: int | None = None
    time_limit_s: int | None = None
    env: dict[str, str] = msgspec.field(default_factory=dict)
    idempotency_key: str | None = None
    chdir: str | None = None
    mail_type: list[str] | None = None  # Q10: BEGIN, END, FAIL, REQUEUE; [] is NONE
    mail_user: str | None = None  # Q10: e-mail address for this job's notifications
    dependency: str | None = None
    hold: bool = False
    workspace: str | None = None
    workspace_image: str | None = None
    array: JobArray | None = None
    # U6 (sbatch): -o/-e as written, --open-mode, --signal "[B:]SIG@T" (the backends execute
    # them) and the warnings given at submit; absent: none, as every earlier job
    output: str | None = None
    error: str | None = None
    open_mode: str | None = None
    signal: str | None = None
    sbatch_warnings: list[str] = msgspec.field(default_factory=list)


class JobHeld(JobEvent, frozen=True, kw_only=True, tag="JobHeld"):
    """A personal-queue job is held (SPEC Q9): it is not promoted until released."""

    by: str


class JobReleased(JobEvent, frozen=True, kw_only=True, tag="JobReleased"):
    """A held job is released (SPEC Q9): promotion may pick it again (Q5)."""

    by: str


class JobPromoted(JobEvent, frozen=True, kw_only=True, tag="JobPromoted"):
    """Personal queue → global queue (SPEC Q5)."""

    queue_entered_at: float


# --- reservations (SPEC R1–R5) --------------------------------------------------------------

ReleaseReason = Literal["dispatched", "swap", "demoted", "cancelled", "maintenance", "capacity"]


class ReservationStarted(JobEvent, frozen=True, kw_only=True, tag="ReservationStarted"):
    node: str
    tier: str
    gpus: list[int]  # GPU indices held


class ReservationGrown(JobEvent, frozen=True, kw_only=True, tag="ReservationGrown"):
    node: str
    tier: str
    gpus: list[int]  # all GPU indices held after growing
    added: list[int] = msgspec.field(default_factory=list)


ShrinkReason = Literal["lost", "yielded", "lent"]


class ReservationShrunk(JobEvent, frozen=True, kw_only=True, tag="ReservationShrunk"):
    """Reserved GPUs leave the reservation and the rest is kept: R5 `lost` (down, or taken)
    while the placement can still fit the job, or R6 `yielded` (`reservation_demotion: yield`)
    to a higher job that can start on them and nowhere else. `gpu_seconds` (held by the removed
    GPUs so far) is charged with the attempt's end, like a swap's (R4, F4). v2 added `reason`;
    absent: `lost`, the only reason of v1. v3 added R7 `lent` (`reservation_backfill: limit`):
    the GPUs start `lent_to`, a lower job whose time limit ends by `until` (the reservation's
    shadow time); from then on their time is that job's (F5) and the reservation grows back
    onto them when it ends (D3.b)."""

    schema_version: int = 3
    node: str
    tier: str
    gpus: list[int]  # still held
    removed: list[int]
    gpu_seconds: float
    tflops: float
    reason: ShrinkReason = "lost"
    lent_to: str | None = None  # v3, R7 `lent`
    until: float | None = None  # v3, R7 `lent`: the shadow time


class ReservationReleased(JobEvent, frozen=True, kw_only=True, tag="ReservationReleased"):
    node: str
    tier: str
    gpus: list[int]
    reason: ReleaseReason
    gpu_seconds: float  # GPU-seconds held by the whole reservation
    charged_now: bool  # True for R3-like releases (demoted, maintenance, capacity)
    tflops: float = 0.0


# --- execution (SPEC §5) --------------------------------------------------------------------

JobEndState = Literal["COMPLETED", "FAILED", "CANCELLED"]


class JobDispatched(JobEvent, frozen=True, kw_only=True, tag="JobDispatched"):
    attempt: int
    node: str
    tier: str
    gpus: list[int]


class JobStarted(JobEvent, frozen=True, kw_only=True, tag="JobStarted"):
    attempt: int
    backend_job_id: str
    isolation: str = "none"


class JobEnded(JobEvent, frozen=True, kw_only=True, tag="JobEnded"):
    """An attempt ended (SPEC X6). `usage` = TFLOP-s of this attempt not already charged:
    `(gpu_seconds_startup + gpu_seconds_run + gpu_seconds_reserved) × tflops` (F1, F2, F5)."""

    schema_version: int = 2
    attempt: int
    state: JobEndState
    exit_code: int | None = None
    node: str | None = None
    tier: str | None = None
    gpus: list[int] = msgspec.field(default_factory=list)
    gpu_seconds_run: float = 0.0
    gpu_seconds_reserved: float = 0.0  # the reserved part not already charged (R3 excluded)
    # F5: GPUs held from the dispatch until the backend started the job (or until the attempt
    # ended, when it never started): held, so charged, though nothing ran yet (v2)
    gpu_seconds_startup: float = 0.0
    tflops: float = 0.0
    usage: float = 0.0
    oom: bool = False
    host_oom: bool = False
    reason: str | None = None  # e.g. "OOM", "NonZeroExitCode", "TIMEOUT", "NODE_FAIL"
    kill_failed: bool = False
    backend_job_id: str | None = None


class JobRetryScheduled(JobEvent, frozen=True, kw_only=True, tag="JobRetryScheduled"):
    """OOM escalation (SPEC X8): back to GLOBAL_QUEUE_WAIT keeping queue_entered_at."""

    attempt: int
    min_vram_gb: int


class JobRetryDeclined(JobEvent, frozen=True, kw_only=True, tag="JobRetryDeclined"):
    """OOM escalation refused (SPEC X8): the job stays FAILED with reason OOM, for good.

    The dispatcher records the decision once, when the attempt ends, so it is never re-checked
    (a bigger tier coming back later must not revive a FAILED job, S2)."""

    attempt: int  # the attempt that ran out of GPU memory
    reason: Literal["max_attempts", "no_fit"]
    needed_vram_gb: int  # what a retry would have needed (more than the tier's VRAM)


class JobCancelRequested(JobEvent, frozen=True, kw_only=True, tag="JobCancelRequested"):
    by: str


# --- accounting (SPEC §3) -------------------------------------------------------------------

ChargeReason = Literal["job_end", "demoted", "maintenance", "capacity", "initial"]


class UsageCharged(Event, frozen=True, kw_only=True, tag="UsageCharged"):
    lab: str
    amount: float
    value_after: float
    as_of: float
    job_id: str | None = None
    reason: ChargeReason = "job_end"
    attempt: int | None = None


# --- notifications (SPEC Q10) ---------------------------------------------------------------


class NotificationSettingsChanged(
    Event, frozen=True, kw_only=True, tag="NotificationSettingsChanged"
):
    """A user's notification defaults (Q10), replacing the previous ones whole: where to send
    (an e-mail address, a Slack-compatible webhook URL) and which kinds by default for jobs
    that name none. The notifier folds these; the last one on the user's subject is current."""

    user: str
    email: str | None = None
    webhook_url: str | None = None
    mail_type: list[str] = msgspec.field(default_factory=list)  # [] is NONE


# --- backfill (SPEC §6), maintenance (§7), inventory (§1.2) --------------------------------


class BackfillStarted(Event, frozen=True, kw_only=True, tag="BackfillStarted"):
    backfill_id: str
    node: str
    tier: str
    gpu: int
    backend_job_id: str | None = None
    endpoint: str | None = None


class BackfillEnded(Event, frozen=True, kw_only=True, tag="BackfillEnded"):
    backfill_id: str
    node: str
    tier: str
    gpu: int
    reason: Literal["preempted", "reclaimed", "exited", "failed"] = "preempted"


MaintenanceState = Literal["NORMAL", "DRAINING", "BACKFILL_RECOVERY", "ACTIVE"]


class MaintenanceChanged(Event, frozen=True, kw_only=True, tag="MaintenanceChanged"):
    state: MaintenanceState
    by: str
    message: str = ""


class NodeInventoryObserved(Event, frozen=True, kw_only=True, tag="NodeInventoryObserved"):
    """What a backend sees of one node: GPUs per tier and which indices are down."""

    node: str
    gpus: dict[str, int]  # tier -> GPU count
    down: dict[str, list[int]] = msgspec.field(default_factory=dict)  # tier -> down indices
    state: str = "up"  # up | drain | down


# --- workspaces (SPEC X4a): one subject per workspace, `<prefix>.workspace.<workspace_id>` ---

WorkspaceScope = Literal["user", "lab"]
WorkspaceSource = Literal["requirements", "environment", "containerfile"]


class WorkspaceEvent(Event, frozen=True, kw_only=True):
    workspace_id: str  # jpu.domain.workspaces.workspace_id(scope, lab, user, name)


class WorkspaceBuildRequested(
    WorkspaceEvent, frozen=True, kw_only=True, tag="WorkspaceBuildRequested"
):
    """A build (or a rebuild: `build` 2, 3, …) asked for; the builder follows these."""

    build: int
    user: str  # who asked; the owner of a `user` workspace
    lab: str
    name: str
    scope: WorkspaceScope
    source_kind: WorkspaceSource
    # the pip requirements the build installs (an environment.yml's, converted), or the
    # Containerfile it builds (source_kind "containerfile")
    source: str


class WorkspaceBuilt(WorkspaceEvent, frozen=True, kw_only=True, tag="WorkspaceBuilt"):
    build: int
    image: str
    size: int | None = None  # bytes of the image
    created_at: float
    log: str = ""  # the build log's tail (the owner reads it from any host)


class WorkspaceBuildFailed(WorkspaceEvent, frozen=True, kw_only=True, tag="WorkspaceBuildFailed"):
    build: int
    reason: str
    log: str = ""


class WorkspaceDeleted(WorkspaceEvent, frozen=True, kw_only=True, tag="WorkspaceDeleted"):
    by: str


class WorkspaceDefaultChanged(Event, frozen=True, kw_only=True, tag="WorkspaceDefaultChanged"):
    """A user's default workspace (X4a): the one a job that names none runs in; None clears it.
    On the user's own subject for it (`<prefix>.user.<user>.workspace`): the last one is
    current."""

    user: str
    workspace: str | None = None


# --- identities (SPEC SEC3): `<prefix>.identity.lab.<lab>`, `<prefix>.identity.user.<user>` ---
# Appended by the operator's tools only (the admin identity, SEC2); folded by jpu.domain.identities
# and the `identities` projection (the authentication tables). `by`: who did it, for the audit.


class IdentityEvent(Event, frozen=True, kw_only=True):
    by: str = ""


class LabAdded(IdentityEvent, frozen=True, kw_only=True, tag="LabAdded"):
    lab: str


class UserAdded(IdentityEvent, frozen=True, kw_only=True, tag="UserAdded"):
    user: str
    lab: str
    role: str  # user | lab_admin | admin
    max_active_jobs: int | None = None  # None: the configured default (§1.3)


class UserRemoved(IdentityEvent, frozen=True, kw_only=True, tag="UserRemoved"):
    """The user's tokens were revoked before (TokenRevoked); the name is never reused."""

    user: str


class TokenIssued(IdentityEvent, frozen=True, kw_only=True, tag="TokenIssued"):
    """A bearer token of `user`, by its SHA-256 hex digest only: the log holds no secret."""

    user: str
    token_digest: str


class TokenRevoked(IdentityEvent, frozen=True, kw_only=True, tag="TokenRevoked"):
    user: str
    token_digest: str


AnyEvent = (
    JobSubmitted
    | JobPromoted
    | ReservationStarted
    | ReservationGrown
    | ReservationShrunk
    | ReservationReleased
    | JobDispatched
    | JobStarted
    | JobEnded
    | JobRetryScheduled
    | JobRetryDeclined
    | JobCancelRequested
    | JobHeld
    | JobReleased
    | UsageCharged
    | BackfillStarted
    | BackfillEnded
    | MaintenanceChanged
    | NodeInventoryObserved
    | NotificationSettingsChanged
    | WorkspaceBuildRequested
    | WorkspaceBuilt
    | WorkspaceBuildFailed
    | WorkspaceDeleted
    | WorkspaceDefaultChanged
    | LabAdded
    | UserAdded
    | UserRemoved
    | TokenIssued
    | TokenRevoked
)

EVENT_TYPES: Final[tuple[type[Event], ...]] = AnyEvent.__args__

_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(AnyEvent)


class Delivered(msgspec.Struct, frozen=True):
    """One event as read from the log: its stream sequence (the global order), subject, headers.
    Defined with the events, so the pure folds (domain, policy, sim, explain) read logged events
    without importing the bus that delivers them."""

    seq: int
    subject: str
    event: AnyEvent
    headers: dict[str, str]


def encode(event: Event) -> bytes:
    return _encoder.encode(event)


def decode(data: bytes) -> AnyEvent:
    """Decode one event; raises msgspec.ValidationError / DecodeError on bad input."""
    return _decoder.decode(data)


def new_event_id() -> str:
    return uuid.uuid4().hex


def subject_for(event: Event, prefix: str = "jpu") -> str:
    """The subject an event is appended on (SPEC E2: one subject per job for concurrency)."""
    if isinstance(event, JobEvent):
        return f"{prefix}.job.{event.job_id}"
    if isinstance(event, UsageCharged):
        return f"{prefix}.lab.{event.lab}"
    if isinstance(event, BackfillStarted | BackfillEnded):
        return f"{prefix}.backfill.{event.node}"
    if isinstance(event, MaintenanceChanged):
        return f"{prefix}.maintenance"
    if isinstance(event, NodeInventoryObserved):
        return f"{prefix}.inventory.{event.node}"
    if isinstance(event, NotificationSettingsChanged):
        return f"{prefix}.user.{event.user}"
    if isinstance(event, WorkspaceDefaultChanged):
        return f"{prefix}.user.{event.user}.workspace"
    if isinstance(event, WorkspaceEvent):
        return f"{prefix}.workspace.{event.workspace_id}"
    if isinstance(event, LabAdded):
        return f"{prefix}.identity.lab.{event.lab}"
    if isinstance(event, UserAdded | UserRemoved | TokenIssued | TokenRevoked):
        return f"{prefix}.identity.user.{event.user}"
    raise TypeError(f"no subject for {type(event).__name__}")
