"""What a simulation run is asked to do: the policy and its knobs (defaults = the services')."""

from __future__ import annotations

import msgspec

from jpu.config import Cluster, Config, DemotionMode, ReservationBackfill

_DEFAULTS = {f.name: f.default for f in msgspec.structs.fields(Config)}  # the services' defaults


class SimParams(msgspec.Struct, frozen=True, kw_only=True):
    policy: str = "jpu"  # a key of jpu.policy.POLICIES
    half_life_s: float = _DEFAULTS["half_life_s"]  # F3
    cycle_s: float = _DEFAULTS["cycle_s"]  # D3: periodic cycle
    min_cycle_gap_s: float = _DEFAULTS["min_cycle_gap_s"]  # D8: event-triggered cycles
    max_active_jobs: int = _DEFAULTS["max_active_jobs"]  # Q5, for users the cluster file omits
    max_attempts: int = _DEFAULTS["max_attempts"]  # X8
    backfill: bool = _DEFAULTS["backfill_enabled"]  # §6
    backfill_settle_s: float = _DEFAULTS["backfill_settle_s"]  # B1
    progress: bool = False  # U3: progress lines on stderr
    # R6: how R3 demotes; None = the cluster file's `reservation_demotion[_margin]` (whose
    # defaults are the services' own), so the simulator runs the mode the services would
    reservation_demotion: DemotionMode | None = None
    reservation_demotion_margin: float | None = None
    # R7: backfill under a reservation; None = the cluster file's `reservation_backfill`
    reservation_backfill: ReservationBackfill | None = None

    def resolved(self, cluster: Cluster) -> SimParams:
        """The parameters with every "from the cluster file" value filled in."""
        return msgspec.structs.replace(
            self,
            reservation_demotion=self.reservation_demotion or cluster.reservation_demotion,
            reservation_demotion_margin=(
                cluster.reservation_demotion_margin
                if self.reservation_demotion_margin is None
                else self.reservation_demotion_margin
            ),
            reservation_backfill=self.reservation_backfill or cluster.reservation_backfill,
        )
