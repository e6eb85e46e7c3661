"""Who may publish and subscribe what on NATS (SPEC SEC2): one identity per service, and only
the service that owns an event type publishes its subject. Pure: the table, and the
nats-server `authorization` block rendered from it (jpu.bus.auth writes it with the passwords).

Ownership is per subject, because NATS permissions are: the subjects of jpu.events.subject_for.
A job's subject (`<prefix>.job.<id>`) carries the events of three services (intake submits and
cancels, the dispatcher reserves and dispatches, the Slurm agent starts and ends), so those three
share it; every other subject has its owners only. The gateway publishes no event at all: its
writes are commands to intake (`<prefix>_cmd.>`), which decides and appends (SPEC E4).

Only the admin identity (`python -m jpu.stack prepare`, the operator's tools) creates or updates
the event stream, its DLQ and the shared buckets; a service reads them through the JetStream API
narrowed to those streams, and creates only the bucket it alone writes (the dispatcher's lease).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from jpu import events as ev
from jpu.commands import VIEWS_BUCKET

ADMIN: Final = "admin"
SERVICES: Final = (
    "gateway",
    "intake",
    "dispatcher",
    "slurm_agent",
    "accounting",
    "backfill",
    "notifier",
)
SNAPSHOTS_BUCKET: Final = "jpu_snapshots"  # jpu.bus.snapshots.BUCKET
LEASES_BUCKET: Final = "jpu_leases"  # jpu_services.dispatcher.lease.BUCKET

# Event type → the services that append it (SPEC SEC2). The admin identity may append anything
# (the stack publishes the configured inventory before any agent runs, §1.2).
OWNERS: Final[dict[type[ev.Event], tuple[str, ...]]] = {
    ev.JobSubmitted: ("intake",),
    ev.JobHeld: ("intake",),
    ev.JobReleased: ("intake",),
    ev.JobPromoted: ("intake",),
    ev.JobCancelRequested: ("intake",),
    ev.ReservationStarted: ("dispatcher",),
    ev.ReservationGrown: ("dispatcher",),
    ev.ReservationShrunk: ("dispatcher",),
    ev.ReservationReleased: ("dispatcher",),
    ev.JobDispatched: ("dispatcher",),
    ev.JobRetryScheduled: ("dispatcher",),
    ev.JobRetryDeclined: ("dispatcher",),
    ev.JobStarted: ("slurm_agent",),
    # intake ends a job cancelled before dispatch; the dispatcher one it gives up on; the agent
    # one that ran
    ev.JobEnded: ("intake", "dispatcher", "slurm_agent"),
    ev.UsageCharged: ("accounting",),
    ev.BackfillStarted: ("backfill",),
    ev.BackfillEnded: ("backfill",),
    ev.MaintenanceChanged: ("intake", "dispatcher"),  # an admin's request; the automatic steps
    ev.NodeInventoryObserved: ("slurm_agent",),
    ev.NotificationSettingsChanged: ("intake",),
    ev.WorkspaceBuildRequested: ("intake",),
    ev.WorkspaceDeleted: ("intake",),
    ev.WorkspaceDefaultChanged: ("intake",),
    ev.WorkspaceBuilt: ("slurm_agent",),
    ev.WorkspaceBuildFailed: ("slurm_agent",),
    # SEC3: identities are the operator's (jpu.tools.identities, as admin); no service adds one
    ev.LabAdded: (),
    ev.UserAdded: (),
    ev.UserRemoved: (),
    ev.TokenIssued: (),
    ev.TokenRevoked: (),
}

# The subject pattern each event type is appended on (jpu.events.subject_for, with `*` for ids).
_SUBJECTS: Final[dict[type[ev.Event], str]] = {
    ev.UsageCharged: "lab.*",
    ev.BackfillStarted: "backfill.*",
    ev.BackfillEnded: "backfill.*",
    ev.MaintenanceChanged: "maintenance",
    ev.NodeInventoryObserved: "inventory.*",
    ev.NotificationSettingsChanged: "user.*",
    ev.WorkspaceDefaultChanged: "user.*.workspace",
    ev.LabAdded: "identity.lab.*",
    ev.UserAdded: "identity.user.*",
    ev.UserRemoved: "identity.user.*",
    ev.TokenIssued: "identity.user.*",
    ev.TokenRevoked: "identity.user.*",
}


def event_subject(event_type: type[ev.Event], prefix: str) -> str:
    if issubclass(event_type, ev.JobEvent):
        return f"{prefix}.job.*"
    if issubclass(event_type, ev.WorkspaceEvent):
        return f"{prefix}.workspace.*"
    return f"{prefix}.{_SUBJECTS[event_type]}"


@dataclass(frozen=True)
class Permissions:
    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool = False  # may answer requests (intake: the commands' replies)
    notes: tuple[str, ...] = field(default=())


def owned_subjects(service: str, prefix: str) -> list[str]:
    """The event subjects `service` may publish (sorted, each once)."""
    return sorted({event_subject(t, prefix) for t, owners in OWNERS.items() if service in owners})


def _read_stream(stream: str) -> list[str]:
    """JetStream API to read `stream`: its info, single messages, and consumers on it."""
    api = "$JS.API"
    return [
        f"{api}.STREAM.INFO.{stream}",
        f"{api}.STREAM.MSG.GET.{stream}",
        f"{api}.DIRECT.GET.{stream}",
        f"{api}.DIRECT.GET.{stream}.>",
        f"{api}.CONSUMER.CREATE.{stream}",
        f"{api}.CONSUMER.CREATE.{stream}.>",
        f"{api}.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"{api}.CONSUMER.INFO.{stream}.>",
        f"{api}.CONSUMER.DELETE.{stream}.>",
        f"{api}.CONSUMER.MSG.NEXT.{stream}.>",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


def _uses_snapshots(service: str) -> bool:
    return service in ("intake", "dispatcher", "accounting", "backfill")  # SPEC O6 followers


def service_permissions(service: str, *, stream: str = "JPU", prefix: str = "jpu") -> Permissions:
    """Everything `service` needs on the bus, nothing it does not (SPEC SEC2)."""
    if service not in SERVICES:
        raise ValueError(f"no NATS identity for {service!r} (one of {', '.join(SERVICES)})")
    views, snaps, leases = f"KV_{VIEWS_BUCKET}", f"OBJ_{SNAPSHOTS_BUCKET}", f"KV_{LEASES_BUCKET}"
    # STREAM.NAMES: nats-py finds a bucket's stream by subject (names only, no contents)
    publish = [
        "$JS.API.INFO",
        "$JS.API.STREAM.NAMES",
        f"{prefix}_dlq.>",
    ]  # DLQ: a consumer parks (O5)
    for s in (stream, f"{stream}_DLQ", views, snaps):
        publish += _read_stream(s)
    publish += owned_subjects(service, prefix)
    if service == "gateway":
        publish.append(f"{prefix}_cmd.>")  # commands to intake, never an event
    if service == "dispatcher":  # the queue view it alone writes, and its leader lease (D1)
        publish += [f"$KV.{VIEWS_BUCKET}.>", f"$KV.{LEASES_BUCKET}.>"]
        publish += [*_read_stream(leases), f"$JS.API.STREAM.CREATE.{leases}"]
    if _uses_snapshots(service):  # writes and prunes its snapshots (O6)
        publish += [f"$O.{SNAPSHOTS_BUCKET}.>", f"$JS.API.STREAM.PURGE.{snaps}"]
    subscribe = ["_INBOX.>"]  # JetStream API replies, pull batches, request replies
    if service == "intake":
        subscribe.append(f"{prefix}_cmd.>")
    return Permissions(
        publish=tuple(publish), subscribe=tuple(subscribe), allow_responses=service == "intake"
    )


def table(stream: str = "JPU", prefix: str = "jpu") -> dict[str, Permissions]:
    return {s: service_permissions(s, stream=stream, prefix=prefix) for s in SERVICES}


def _quote(items: Iterable[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def render_authorization(
    passwords: dict[str, str], *, stream: str = "JPU", prefix: str = "jpu"
) -> str:
    """A nats-server `authorization { users = [...] }` block: `admin` may do anything, each
    service what the table allows. `passwords` maps user → password or a reference the server
    resolves (`$NATS_PW_GATEWAY`, an environment variable: nothing secret in the file)."""
    lines = ["authorization {", "  users = ["]
    lines.append(f'    {{user: "{ADMIN}", password: {_value(passwords[ADMIN])}}}')
    for service, perms in table(stream, prefix).items():
        responses = "\n        allow_responses: true" if perms.allow_responses else ""
        lines += [
            f'    {{user: "{service}", password: {_value(passwords[service])},',
            "      permissions: {",
            f"        publish: {{allow: {_quote(perms.publish)}}}",
            f"        subscribe: {{allow: {_quote(perms.subscribe)}}}{responses}",
            "      }",
            "    }",
        ]
    lines += ["  ]", "}", ""]
    return "\n".join(lines)


def _value(password: str) -> str:
    """An environment reference is left bare for the server to resolve; a literal is quoted."""
    if password.startswith("$"):
        return password
    return '"' + password.replace("\\", "\\\\").replace('"', '\\"') + '"'
