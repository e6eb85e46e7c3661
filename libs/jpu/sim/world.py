"""What the simulator's parts (backend.py, backfill_service.py, cycles.py, summary.py) read and
change.

The parts are functions of this one object, the `Simulator` (engine.py) that plays them: they
depend on what it offers, not on the engine, so nothing inside `jpu.sim` imports in a circle.
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from jpu.config import Tier
from jpu.domain.cluster import ClusterState
from jpu.events import Event, JobDispatched, JobSubmitted
from jpu.sim.cluster import SimCluster
from jpu.sim.eventlog import EventLog
from jpu.sim.params import SimParams
from jpu.sim.state import Outcome, Totals
from jpu.sim.workload import WorkloadJob

E = TypeVar("E", bound=Event)

FitKey = tuple[int, frozenset[str] | None, int | None]  # a request class (SPEC Q2)


class World(Protocol):
    # the services' fold and the simulated cluster beside it
    state: ClusterState
    cluster: SimCluster
    log: EventLog
    now: float  # the virtual clock
    params: SimParams
    tiers: dict[str, Tier]
    # the workload and what the summary records of it
    specs: dict[str, WorkloadJob]
    outcomes: dict[str, Outcome]
    initial_usage: dict[str, float]
    totals: Totals
    # the simulated backend's record of in-flight jobs (what the agent folds per job)
    submitted: dict[str, JobSubmitted]
    running: dict[str, JobDispatched]  # job id -> the attempt it runs
    fit_cache: dict[FitKey, bool]
    duties_due: bool  # a queued job's cancel or an OOM awaits the dispatcher (phase 0)

    def at(self, t: float, kind: int, obj: Any = None) -> None:
        """Schedule a happening of `kind` at virtual time `t`."""

    def append(self, event: E) -> E:
        """Append to the log, fold, and react (charges, the summary, a D8 cycle)."""

    def dispatched(self, event: JobDispatched) -> JobDispatched:
        """A cycle's dispatch as it is appended (a forward estimate restamps it)."""

    def promote(self, user: str) -> None:
        """Intake's Q5 for the user."""

    def reject(self, spec: WorkloadJob) -> None:
        """Intake's Q2 refusal."""
