"""Errors the event bus raises to its callers."""

from __future__ import annotations

from nats.js.errors import APIError

# JetStream API error code for a failed Nats-Expected-Last-Subject-Sequence check.
WRONG_LAST_SEQUENCE = 10071
# JetStream API error code for "stream name already in use with a different configuration".
STREAM_NAME_IN_USE = 10058


class BusError(RuntimeError):
    """The bus could not do what was asked (configuration, stream setup)."""


class ConcurrencyConflict(Exception):
    """Another writer moved the subject first (SPEC E2): re-read, decide again, retry."""

    def __init__(self, subject: str, expected_last_subject_seq: int, detail: str = "") -> None:
        super().__init__(
            f"{subject}: expected last subject sequence {expected_last_subject_seq}"
            + (f" ({detail})" if detail else "")
        )
        self.subject = subject
        self.expected_last_subject_seq = expected_last_subject_seq


def is_wrong_last_sequence(err: APIError) -> bool:
    return err.err_code == WRONG_LAST_SEQUENCE
