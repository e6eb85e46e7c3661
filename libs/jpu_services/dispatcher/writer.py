"""Append the dispatcher's decisions with optimistic concurrency (SPEC E2).

Every event goes on its subject with the expected last sequence the decision was made on (the
fold's view of that job / of maintenance), chained for several events of one subject in one
cycle. A ConcurrencyConflict means another writer moved the subject since the snapshot: the
cycle stops appending (its later decisions may depend on this one, e.g. a dispatch onto GPUs a
release was to free) and a new cycle decides again on the caught-up state. Never a double
dispatch: a second JobDispatched for the same job would need the same expected sequence.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import msgspec

from jpu.bus import ConcurrencyConflict, EventBus
from jpu.domain.cluster import ClusterState
from jpu.events import Event, JobEvent, MaintenanceChanged, subject_for
from jpu.runtime.metrics import record_appended


class LeaseLost(Exception):
    """The lease expired or a renewal failed: stop acting at once."""


def deterministic_id(kind: str, subject: str, expected: int) -> str:
    return hashlib.sha256(f"{kind}|{subject}|{expected}".encode()).hexdigest()[:32]


class Writer:
    def __init__(self, bus: EventBus, state: ClusterState, lease_valid: Callable[[], bool]) -> None:
        self.bus, self.state, self.lease_valid = bus, state, lease_valid
        self.expected: dict[str, int] = {}
        self.max_seq = 0
        self.appended = 0
        self.conflicts = 0

    def begin(self) -> None:
        """A new cycle: expectations come from the (caught-up) fold again."""
        self.expected.clear()

    def _state_seq(self, event: Event) -> int:
        if isinstance(event, JobEvent):
            job = self.state.jobs.get(event.job_id)
            return job.last_seq if job is not None else 0
        if isinstance(event, MaintenanceChanged):
            return self.state.maintenance.last_seq
        raise TypeError(f"the dispatcher does not write {type(event).__name__}")

    async def append(self, event: Event) -> int:
        if not self.lease_valid():
            raise LeaseLost
        subject = subject_for(event, self.bus.prefix)
        expected = self.expected.get(subject, self._state_seq(event))
        kind = str(type(event).__struct_config__.tag)
        event = msgspec.structs.replace(event, event_id=deterministic_id(kind, subject, expected))
        try:
            seq = await self.bus.append(event, expected_last_subject_seq=expected)
        except ConcurrencyConflict:
            self.conflicts += 1
            raise
        self.expected[subject] = seq
        self.max_seq = max(self.max_seq, seq)
        self.appended += 1
        record_appended(event)  # SPEC O4: dispatches, reservations
        return seq

    async def append_all(self, events: list[Event]) -> bool:
        """Append in order; False (and stop) at the first conflict."""
        for event in events:
            try:
                await self.append(event)
            except ConcurrencyConflict:
                return False
        return True
