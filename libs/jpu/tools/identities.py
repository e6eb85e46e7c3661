"""The operator's identity commands as events (SPEC SEC3): read the identities' fold from the log,
let jpu.domain.identities decide, append with the subject's expected last sequence (SPEC E2).

The gateway authenticates against the `identities` projection (jpu.store.auth), which the
projector folds from these events; with a pool, each command waits until the projection has
applied what it appended, so a token printed by `token create` works at once. Appending needs
the admin identity on NATS (SPEC SEC2: no service adds a user).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg

from jpu.bus import ConcurrencyConflict, EventBus
from jpu.domain import identities as rules
from jpu.events import IdentityEvent, LabAdded, new_event_id, subject_for
from jpu.store.auth import hash_token, new_token
from jpu.store.projection import wait_applied

log = logging.getLogger(__name__)

PROJECTION = "identities"
_TRIES = 5  # a concurrent operator's append moved the subject: read again and decide again


@dataclass
class Fold:
    state: rules.Identities = field(default_factory=rules.Identities)
    last_seq: dict[str, int] = field(default_factory=dict)  # subject → its last seq


async def read(bus: EventBus) -> Fold:
    """Every identity event of the log, folded (a few per user: small)."""
    fold = Fold()
    async for d in bus.replay(filter_subject=f"{bus.prefix}.identity.>"):
        if isinstance(d.event, IdentityEvent):
            fold.state.apply(d.event)
            fold.last_seq[d.subject] = d.seq
    return fold


class Identities:
    """The commands, on one bus (and the projection's pool to wait for, when given)."""

    def __init__(self, bus: EventBus, pool: asyncpg.Pool | None, now: float, by: str = "") -> None:
        self.bus, self.pool, self.now, self.by = bus, pool, now, by

    async def _append(self, events: Sequence[IdentityEvent], fold: Fold) -> int:
        seq = 0
        for e in events:
            subject = subject_for(e, self.bus.prefix)
            seq = await self.bus.append(e, expected_last_subject_seq=fold.last_seq.get(subject, 0))
            fold.last_seq[subject] = seq
            fold.state.apply(e)
        return seq

    async def _decide(self, decide: rules.Decide) -> list[IdentityEvent]:
        for _ in range(_TRIES):
            fold = await read(self.bus)
            events = list(decide(fold.state))
            try:
                seq = await self._append(events, fold)
            except ConcurrencyConflict:
                continue
            if seq and self.pool is not None:
                await wait_applied(self.pool, PROJECTION, seq, timeout=30.0)
            return events
        raise rules.IdentityError("another operator changed the same identity: try again")

    async def add_lab(self, name: str) -> bool:
        """False when the lab exists already."""
        e = await self._decide(lambda s: _some(rules.add_lab(s, name, self.now, self.by)))
        return bool(e)

    async def add_user(
        self, name: str, lab: str, role: str = "user", max_active_jobs: int | None = None
    ) -> bool:
        """False when the name exists, or existed (a removed name is not reused)."""
        e = await self._decide(
            lambda s: _some(rules.add_user(s, name, lab, role, max_active_jobs, self.now, self.by))
        )
        return bool(e)

    async def install_token(self, user: str, token: str) -> None:
        """Record a given token (the demo's well-known ones); a revoked one stays revoked."""
        await self._decide(
            lambda s: _some(rules.issue_token(s, user, hash_token(token), self.now, self.by))
        )

    async def create_token(self, user: str) -> str:
        """A new random token; the caller shows it once, the log keeps its digest only."""
        token = new_token()
        await self._decide(
            lambda s: _some(rules.issue_token(s, user, hash_token(token), self.now, self.by))
        )
        return token

    async def revoke_tokens(self, user: str) -> int:
        return len(await self._decide(lambda s: rules.revoke_tokens(s, user, self.now, self.by)))

    async def remove_user(self, user: str) -> int:
        """Revokes the user's tokens, then removes the user; returns the tokens revoked."""
        events = await self._decide(lambda s: rules.remove_user(s, user, self.now, self.by))
        return len(events) - 1

    async def rotate_token(self, user: str) -> str:
        """Revoke the user's tokens, then issue a new one (two steps: a crash between them
        leaves the user with no token, never with an old one still valid)."""
        await self.revoke_tokens(user)
        return await self.create_token(user)


def _some(event: IdentityEvent | None) -> list[IdentityEvent]:
    return [] if event is None else [event]


async def adopt(bus: EventBus, pool: asyncpg.Pool, now: float) -> int:
    """Identities an earlier version kept only in PostgreSQL become events, with their own
    dates (SEC3: their history then starts in the audit log); returns the events appended.
    Rows the log already has are left alone, so this runs at every start."""
    fold = await read(bus)
    known = fold.state
    events: list[IdentityEvent] = []
    by = "adopted from the database"
    for r in await pool.fetch("SELECT name, extract(epoch FROM created_at) AS ts FROM labs"):
        if r["name"] not in known.labs:
            events.append(
                LabAdded(event_id=new_event_id(), ts=float(r["ts"]), lab=r["name"], by=by)
            )
    rows = await pool.fetch(
        """SELECT name, lab, role, max_active_jobs, extract(epoch FROM created_at) AS ts,
                  extract(epoch FROM removed_at) AS removed_ts FROM users ORDER BY created_at"""
    )
    tokens = await pool.fetch(
        """SELECT token_hash, "user", extract(epoch FROM created_at) AS ts,
                  extract(epoch FROM revoked_at) AS revoked_ts FROM api_tokens
            ORDER BY created_at"""
    )
    events.extend(rules.adopted(known, [dict(r) for r in rows], [dict(t) for t in tokens], by))
    if not events:
        return 0
    await Identities(bus, None, now)._append(events, fold)
    log.info("adopted %d identity events from the database (SEC3)", len(events))
    return len(events)
