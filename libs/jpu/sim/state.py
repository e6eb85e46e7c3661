"""Mutable per-job and per-run bookkeeping of the simulator (the policy never sees these)."""

from __future__ import annotations

from dataclasses import dataclass, field

from jpu.sim.workload import WorkloadJob

# SPEC §1.4 job states
PERSONAL = "PERSONAL_QUEUE_WAIT"
GLOBAL = "GLOBAL_QUEUE_WAIT"
RESERVING = "RESERVING"
RUNNING = "RUNNING"
COMPLETED, FAILED, CANCELLED = "COMPLETED", "FAILED", "CANCELLED"
REJECTED = "REJECTED"  # SPEC Q2: never queued, no events
TERMINAL = frozenset({COMPLETED, FAILED, CANCELLED, REJECTED})

# kinds of timed happenings, also their order within one instant: a cycle sees all of its time
END, CANCEL, ARRIVAL, BACKFILL, CYCLE = range(5)


@dataclass(slots=True)
class Held:
    """GPUs held by a reservation: per-GPU acquisition time, so grown GPUs are charged exactly."""

    node: str
    tier: str
    since: float
    acquired: dict[int, float] = field(default_factory=dict)  # GPU index -> when taken


@dataclass(slots=True, eq=False)  # identity: a job is itself, not its field values
class SimJob:
    spec: WorkloadJob
    state: str = PERSONAL
    attempt: int = 1
    min_vram_gb: int | None = None
    queue_entered_at: float | None = None
    first_dispatch_at: float | None = None
    end_at: float | None = None
    end_reason: str | None = None
    held: Held | None = None  # current reservation
    uncharged_reserved_gpu_s: float = 0.0  # released by swap/dispatch, charged with the attempt
    uncharged_reserved_cost: float = 0.0
    node: str | None = None  # current or last attempt's placement
    tier: str | None = None
    gpus: tuple[int, ...] = ()
    started_at: float | None = None
    charged: float = 0.0  # TFLOP-s charged to the lab for this job, all attempts

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


@dataclass(slots=True)
class Totals:
    """GPU-seconds by kind, for utilization (SPEC §10)."""

    run_gpu_s: float = 0.0
    reserved_gpu_s: float = 0.0
    backfill_gpu_s: float = 0.0
    cycles: int = 0
    cycles_skipped: int = 0
    demotions: int = 0
    backfills_started: int = 0
    backfills_preempted: int = 0
    oom_retries: int = 0
    max_global_queue: int = 0  # longest global queue a cycle saw
