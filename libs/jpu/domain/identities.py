"""Labs, users and their tokens as a fold of the log (SPEC SEC3, §1.3). Pure.

Identities are events, so their whole history — who was added to which lab with which role, when
a token was issued or revoked, when a user was removed — is in the audit log, and replay rebuilds
the authentication tables like every other view. A token appears only as its SHA-256 digest: the
log never holds a usable secret.

Each operation is decided here from the identities' fold and returns the events to append; the
operator's tool (jpu.tools.identities) appends them with the subject's expected last sequence
(SPEC E2), so two operators racing cannot both add the same user. A removed user keeps its
record (the log's jobs and charges name it) and cannot come back under the same name; a revoked
token stays revoked (SEC3): issuing its digest again changes nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast

from jpu.domain import limits
from jpu.events import (
    IdentityEvent,
    LabAdded,
    TokenIssued,
    TokenRevoked,
    UserAdded,
    UserRemoved,
    new_event_id,
)

Role = Literal["user", "lab_admin", "admin"]
ROLES: Final[tuple[Role, ...]] = ("user", "lab_admin", "admin")
DIGEST_LEN: Final = 64  # sha256 hex


Decide = Callable[["Identities"], "Sequence[IdentityEvent]"]  # a command on the current fold


class IdentityError(ValueError):
    """An operation that cannot be done (unknown lab or user, bad role); the message says why."""


@dataclass
class UserRecord:
    lab: str
    role: Role
    max_active_jobs: int | None
    removed: bool = False
    tokens: dict[str, bool] = field(default_factory=dict)  # digest → revoked

    def active_tokens(self) -> list[str]:
        return [d for d, revoked in self.tokens.items() if not revoked]


@dataclass
class Identities:
    labs: set[str] = field(default_factory=set)
    users: dict[str, UserRecord] = field(default_factory=dict)

    def apply(self, e: IdentityEvent) -> None:
        if isinstance(e, LabAdded):
            self.labs.add(e.lab)
        elif isinstance(e, UserAdded):
            role = cast(Role, e.role)
            self.users.setdefault(e.user, UserRecord(e.lab, role, e.max_active_jobs))
        elif (u := self.users.get(getattr(e, "user", ""))) is not None:
            if isinstance(e, UserRemoved):
                u.removed = True
            elif isinstance(e, TokenIssued):
                u.tokens.setdefault(e.token_digest, False)
            elif isinstance(e, TokenRevoked):
                u.tokens[e.token_digest] = True


def fold(events: Iterable[IdentityEvent]) -> Identities:
    state = Identities()
    for e in events:
        state.apply(e)
    return state


def add_lab(state: Identities, name: str, now: float, by: str = "") -> LabAdded | None:
    """The lab's event, or None when it exists already."""
    why = limits.name_problem("lab", name)  # a NATS subject token; storable text
    if why:
        raise IdentityError(f"{why}, not {limits.printable(name)!r}")
    if name in state.labs:
        return None
    return LabAdded(event_id=new_event_id(), ts=now, lab=name, by=by)


def add_user(
    state: Identities,
    name: str,
    lab: str,
    role: str,
    max_active_jobs: int | None,
    now: float,
    by: str = "",
) -> UserAdded | None:
    """The user's event, or None when the name exists (or existed: a removed name is not
    reused, since the log's jobs and charges already name that user)."""
    why = limits.name_problem("user", name) or limits.name_problem("lab", lab)
    if why:
        raise IdentityError(
            f"{why} (user {limits.printable(name)!r}, lab {limits.printable(lab)!r})"
        )
    if role not in ROLES:
        raise IdentityError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if max_active_jobs is not None and max_active_jobs < 0:
        raise IdentityError("max_active_jobs must be >= 0")
    if lab not in state.labs:
        raise IdentityError(f"unknown lab {lab!r} (add it first: jpu-admin lab add {lab})")
    if name in state.users:
        return None
    return UserAdded(
        event_id=new_event_id(),
        ts=now,
        user=name,
        lab=lab,
        role=role,
        max_active_jobs=max_active_jobs,
        by=by,
    )


def _user(state: Identities, user: str) -> UserRecord:
    why = limits.name_problem("user", user)
    if why:
        raise IdentityError(f"{why}, not {limits.printable(user)!r}")
    record = state.users.get(user)
    if record is None:
        raise IdentityError(f"unknown user {user!r}")
    if record.removed:
        raise IdentityError(f"user {user!r} was removed")
    return record


def issue_token(
    state: Identities, user: str, digest: str, now: float, by: str = ""
) -> TokenIssued | None:
    """A token for an active user, by its digest; None when that digest is known already —
    active, or revoked, which it stays (SEC3)."""
    record = _user(state, user)
    if len(digest) != DIGEST_LEN:
        raise IdentityError("a token is recorded by its sha256 hex digest")
    if digest in record.tokens:
        return None
    return TokenIssued(event_id=new_event_id(), ts=now, user=user, token_digest=digest, by=by)


def revoke_tokens(state: Identities, user: str, now: float, by: str = "") -> list[TokenRevoked]:
    """One event per active token of the user."""
    record = _user(state, user)
    return [
        TokenRevoked(event_id=new_event_id(), ts=now, user=user, token_digest=d, by=by)
        for d in record.active_tokens()
    ]


def remove_user(
    state: Identities, user: str, now: float, by: str = ""
) -> list[TokenRevoked | UserRemoved]:
    """Revoke every active token, then mark the user removed."""
    events: list[TokenRevoked | UserRemoved] = [*revoke_tokens(state, user, now, by)]
    events.append(UserRemoved(event_id=new_event_id(), ts=now, user=user, by=by))
    return events


def adopted(
    known: Identities,
    users: Sequence[Mapping[str, Any]],
    tokens: Sequence[Mapping[str, Any]],
    by: str,
) -> list[IdentityEvent]:
    """Events for the rows an earlier version kept only in its tables (users: name, lab, role,
    max_active_jobs, ts, removed_ts; tokens: token_hash, user, ts, revoked_ts), each dated by
    its row; what the fold already knows gives none. The labs come first (the caller's)."""
    out: list[IdentityEvent] = []
    seen = {name: dataclasses.replace(u, tokens=dict(u.tokens)) for name, u in known.users.items()}
    for r in users:
        if r["name"] not in seen:
            out.append(
                UserAdded(
                    event_id=new_event_id(),
                    ts=float(r["ts"]),
                    user=r["name"],
                    lab=r["lab"],
                    role=r["role"],
                    max_active_jobs=r["max_active_jobs"],
                    by=by,
                )
            )
            seen[r["name"]] = UserRecord(r["lab"], cast(Role, r["role"]), r["max_active_jobs"])
    for t in tokens:
        user, d = t["user"], t["token_hash"]
        record = seen.get(user)
        if record is None:
            continue
        if d not in record.tokens:
            out.append(
                TokenIssued(
                    event_id=new_event_id(), ts=float(t["ts"]), user=user, token_digest=d, by=by
                )
            )
            record.tokens[d] = False
        if t["revoked_ts"] is not None and not record.tokens[d]:
            out.append(
                TokenRevoked(
                    event_id=new_event_id(),
                    ts=float(t["revoked_ts"]),
                    user=user,
                    token_digest=d,
                    by=by,
                )
            )
            record.tokens[d] = True
    for r in users:
        record = seen[r["name"]]
        if r["removed_ts"] is not None and not record.removed:
            out.append(
                UserRemoved(
                    event_id=new_event_id(), ts=float(r["removed_ts"]), user=r["name"], by=by
                )
            )
            record.removed = True
    return out
