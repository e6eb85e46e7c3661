"""SPEC SEC3: identities (labs, users, token digests) are events; jpu.domain.identities decides
each operation on their fold."""

from __future__ import annotations

import hashlib

import pytest

from jpu.domain import identities as rules
from jpu.domain.identities import IdentityError
from jpu.events import LabAdded, TokenIssued, TokenRevoked, UserAdded, UserRemoved, subject_for

DIGEST = hashlib.sha256(b"secret").hexdigest()


def _state(*events: object) -> rules.Identities:
    return rules.fold(events)  # type: ignore[arg-type]


def _lab_and_user() -> rules.Identities:
    s = rules.Identities()
    s.apply(rules.add_lab(s, "BCG", 1.0) or pytest.fail("lab"))
    s.apply(rules.add_user(s, "bcg-alice", "BCG", "user", None, 2.0) or pytest.fail("user"))
    return s


def test_SEC3_identity_events_carry_digests_on_their_own_subjects() -> None:
    s = _lab_and_user()
    e = rules.issue_token(s, "bcg-alice", DIGEST, 3.0, by="root@head")
    assert isinstance(e, TokenIssued) and e.token_digest == DIGEST and e.by == "root@head"
    assert subject_for(e, "jpu") == "jpu.identity.user.bcg-alice"
    lab = LabAdded(event_id="x", ts=1.0, lab="BCG")
    assert subject_for(lab, "jpu") == "jpu.identity.lab.BCG"
    with pytest.raises(IdentityError, match="digest"):
        rules.issue_token(s, "bcg-alice", "secret", 3.0)  # never the token itself


def test_SEC3_adding_twice_is_a_no_op_and_names_are_checked() -> None:
    s = _lab_and_user()
    assert rules.add_lab(s, "BCG", 5.0) is None
    assert rules.add_user(s, "bcg-alice", "BCG", "admin", None, 5.0) is None
    with pytest.raises(IdentityError, match="unknown lab 'NOPE'"):
        rules.add_user(s, "x", "NOPE", "user", None, 5.0)
    with pytest.raises(IdentityError, match="role must be one of"):
        rules.add_user(s, "x", "BCG", "root", None, 5.0)
    with pytest.raises(IdentityError, match="max_active_jobs"):
        rules.add_user(s, "x", "BCG", "user", -1, 5.0)
    with pytest.raises(IdentityError, match="lab name"):
        rules.add_lab(s, "a.b", 5.0)  # a NATS subject token


def test_SEC3_a_revoked_token_stays_revoked() -> None:
    s = _lab_and_user()
    s.apply(rules.issue_token(s, "bcg-alice", DIGEST, 3.0) or pytest.fail("issue"))
    (revoked,) = rules.revoke_tokens(s, "bcg-alice", 4.0)
    s.apply(revoked)
    assert s.users["bcg-alice"].active_tokens() == []
    assert rules.issue_token(s, "bcg-alice", DIGEST, 5.0) is None  # installing it again: nothing
    assert rules.revoke_tokens(s, "bcg-alice", 6.0) == []


def test_SEC3_a_removed_user_is_kept_and_never_comes_back() -> None:
    s = _lab_and_user()
    s.apply(rules.issue_token(s, "bcg-alice", DIGEST, 3.0) or pytest.fail("issue"))
    events = rules.remove_user(s, "bcg-alice", 4.0)
    assert [type(e) for e in events] == [TokenRevoked, UserRemoved]
    for e in events:
        s.apply(e)
    assert s.users["bcg-alice"].removed and s.users["bcg-alice"].lab == "BCG"
    assert rules.add_user(s, "bcg-alice", "BCG", "user", None, 5.0) is None
    with pytest.raises(IdentityError, match="was removed"):
        rules.issue_token(s, "bcg-alice", "f" * 64, 5.0)
    with pytest.raises(IdentityError, match="unknown user 'ghost'"):
        rules.remove_user(s, "ghost", 5.0)


def test_SEC3_rows_of_an_earlier_version_are_adopted_once_with_their_dates() -> None:
    known = _state(LabAdded(event_id="a", ts=1.0, lab="BCG"))
    users = [
        {"name": "bcg-bob", "lab": "BCG", "role": "lab_admin", "max_active_jobs": 3,
         "ts": 10.0, "removed_ts": None},
        {"name": "bcg-old", "lab": "BCG", "role": "user", "max_active_jobs": None,
         "ts": 11.0, "removed_ts": 30.0},
    ]  # fmt: skip
    tokens = [
        {"token_hash": DIGEST, "user": "bcg-bob", "ts": 12.0, "revoked_ts": None},
        {"token_hash": "e" * 64, "user": "bcg-old", "ts": 13.0, "revoked_ts": 29.0},
    ]
    events = rules.adopted(known, users, tokens, by="adopted")
    assert [(type(e).__name__, e.ts) for e in events] == [
        ("UserAdded", 10.0),
        ("UserAdded", 11.0),
        ("TokenIssued", 12.0),
        ("TokenIssued", 13.0),
        ("TokenRevoked", 29.0),
        ("UserRemoved", 30.0),
    ]
    bob = events[0]
    assert isinstance(bob, UserAdded) and (bob.role, bob.max_active_jobs) == ("lab_admin", 3)
    after = rules.fold([*known_events(known), *events])
    assert rules.adopted(after, users, tokens, by="adopted") == []  # once


def known_events(state: rules.Identities) -> list[LabAdded]:
    return [LabAdded(event_id=lab, ts=1.0, lab=lab) for lab in sorted(state.labs)]
