"""A personal-queue job's pending reason as the domain decides it (SPEC D7: Held, Q9; Dependency,
Q8; ArrayThrottle, Q7; ConcurrencyLimit, Q5).

The reason is a function of the whole cluster's state (a parent's end, the slots an array's
tasks or a singleton's name hold, what intake promotes at once), so the gateway keeps the
services' own fold of the log (jpu.domain.cluster, in-flight jobs only as the dispatcher does,
SPEC O6) and asks jpu.domain.promotion (`personal_reasons`, `personal_standing` for many
jobs): no second derivation from rows.

Read-your-writes: before answering, the fold is brought at least as far as the `jobs`
projection the request read its rows from, so a job just held, released or submitted already
reads as such.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Final

import asyncpg
from fastapi import Request

from jpu.bus import EventBus
from jpu.bus.fold_follow import Follower, SnapshotPolicy
from jpu.config import Config
from jpu.domain.cluster import ClusterState
from jpu.domain.promotion import personal_reasons as domain_reasons
from jpu.store.projection import last_applied
from jpu_services.gateway.errors import ApiError

log = logging.getLogger(__name__)

_CATCH_UP_S: Final = 10.0  # a request waits this long for the fold to reach the rows it read


class PersonalReasons:
    """The gateway's fold and the domain's answer on it."""

    def __init__(self, bus: EventBus, config: Config) -> None:
        self.config = config
        self.state = ClusterState.new(config, keep_ended=False)
        # the services' snapshots speed the start up (O6); the gateway writes none of its own
        self.follower = Follower(bus, self.state, snapshots=SnapshotPolicy.from_config(bus, config))

    async def start(self, stop: asyncio.Event) -> asyncio.Task[None]:
        with contextlib.suppress(Exception):  # no snapshot readable: replay from seq 1
            await self.follower.restore()
        self.follower.snapshots = None
        return asyncio.create_task(self.follower.run(stop), name="personal-reasons")

    async def reasons(self, pool: asyncpg.Pool, job_ids: Iterable[str]) -> dict[str, str]:
        """job id → its D7 reason in the personal queue, on a fold no older than the `jobs`
        projection now; a job the fold no longer holds (promoted or ended since the row was
        read) gets none."""
        seq = await last_applied(pool, "jobs")
        try:
            await self.follower.wait_for(seq, _CATCH_UP_S)
        except TimeoutError as e:
            raise ApiError(
                503, "SERVICE_UNAVAILABLE", "the gateway is still reading the log; try again"
            ) from e
        return dict(domain_reasons(self.state, self.config, job_ids))


def personal_reasons(request: Request) -> PersonalReasons:
    found: PersonalReasons = request.app.state.personal_reasons
    return found
