"""Errors the event bus raises to its callers."""

from __future__ import annotations

import nats.errors
import nats.js.errors
from nats.js.errors import APIError

# JetStream API error code for a failed Nats-Expected-Last-Subject-Sequence check.
WRONG_LAST_SEQUENCE = 10071
# The same check failed on a clustered stream's leader while an earlier append to the subject
# was still being replicated ("wrong last sequence"): the same conflict (SPEC E2).
WRONG_LAST_SEQUENCE_CLUSTERED = 10164
# "JetStream system temporarily unavailable": a cluster without a meta or stream leader yet.
CLUSTER_NOT_AVAILABLE = 10008
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
    return err.err_code in (WRONG_LAST_SEQUENCE, WRONG_LAST_SEQUENCE_CLUSTERED)


def is_unreachable(err: BaseException) -> bool:
    """NATS (or JetStream) did not answer: the server is down, restarting, or the connection is
    reconnecting. Worth retrying the same request later (an append keeps its Nats-Msg-Id, so
    the stream stores it once); never a verdict about the request itself."""
    transient = (
        nats.errors.TimeoutError,  # also FlushTimeoutError
        nats.errors.NoRespondersError,  # JetStream not (yet) serving after a restart
        nats.errors.ConnectionReconnectingError,
        nats.errors.StaleConnectionError,
        nats.errors.OutboundBufferLimitError,
        nats.errors.NoServersError,
        nats.js.errors.ServiceUnavailableError,  # 503 from the JetStream API
        nats.js.errors.NoStreamResponseError,
        TimeoutError,
        ConnectionError,
    )
    if isinstance(err, APIError) and err.err_code == CLUSTER_NOT_AVAILABLE:
        return True  # a leader election under way (one node of a cluster lost, SPEC O3)
    return isinstance(err, transient)
