"""The backfill service's decisions, as pure functions of the folded log (SPEC B1–B3, R2, M2).

Starts come from the policy core (`plan_backfill`); this module adds whether a planned start may
still launch, what the service must cancel, and the events that record an instance (their ids
follow from the backfill id, so a repeated append is the same message).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from jpu.domain.cluster import ClusterState
from jpu.domain.holdings import gpus
from jpu.domain.idle import GpuKey, Idle, Tracker
from jpu.domain.observed import BackendStatus
from jpu.events import BackfillEnded, BackfillStarted
from jpu.policy.backfill_plan import BackfillPlan, plan_backfill
from jpu.policy.maintenance import backfill_allowed
from jpu.policy.model import Gpu, MaintenanceState

EndReason = Literal["preempted", "reclaimed", "exited", "failed"]  # BackfillEnded.reason


def plan(tracker: Tracker, now: float, settle_s: float) -> BackfillPlan:
    idle = {k: v.since for k, v in tracker.idle.items()}
    maintenance: MaintenanceState = tracker.state.maintenance.state  # type: ignore[assignment]
    return plan_backfill(gpus(tracker.state), idle, now, settle_s, maintenance)


def still_idle(tracker: Tracker, key: GpuKey, planned: Idle) -> bool:
    """B1/B2: a start is recorded only while its GPU is in the idle period it was planned for;
    a dispatch or reservation the fold applied since took the GPU (the log gave it first)."""
    return tracker.idle.get(key) == planned


def may_launch(tracker: Tracker, key: GpuKey, planned: Idle) -> bool:
    """At launch time, on the live state (not the plan's): maintenance still allows backfill (M2)
    and no dispatch or reservation took the GPU since it was planned (B1, B2)."""
    live: MaintenanceState = tracker.state.maintenance.state  # type: ignore[assignment]
    return backfill_allowed(live) and still_idle(tracker, key, planned)


def started(
    bf: str, gpu: Gpu, backend_job_id: str, endpoint: str | None, now: float
) -> BackfillStarted:
    return BackfillStarted(
        event_id=f"{bf}-started",
        ts=now,
        backfill_id=bf,
        node=gpu.node,
        tier=gpu.tier,
        gpu=gpu.index,
        backend_job_id=backend_job_id,
        endpoint=endpoint,
    )


def ended(start: BackfillStarted, reason: EndReason, now: float) -> BackfillEnded:
    bf = start.backfill_id
    return BackfillEnded(
        event_id=f"{bf}-ended",
        ts=now,
        backfill_id=bf,
        node=start.node,
        tier=start.tier,
        gpu=start.gpu,
        reason=reason,
    )


def to_cancel(state: ClusterState, p: BackfillPlan) -> dict[str, EndReason]:
    """M2: in BACKFILL_RECOVERY/ACTIVE every instance is reclaimed. B2: an instance on a GPU a
    research job now holds is preempted (the agent normally ended it already; this is the net
    for backends that cannot, and for a start that raced a dispatch). R2: a reserved GPU keeps
    its backfill."""
    out: dict[str, EndReason] = dict.fromkeys(p.reclaim, "reclaimed")
    for key, bf in state.backfill.items():
        if state.holders.get(key, "").startswith("job:"):
            out.setdefault(bf, "preempted")
    return out


def end_reason(
    state: ClusterState,
    start: BackfillStarted,
    status: BackendStatus | None,
    requested: Mapping[str, EndReason],
) -> EndReason:
    """How an instance that is gone is recorded: what we asked for, else what the log says (a
    research job on its GPU: preempted by the agent), else its own exit."""
    if start.backfill_id in requested:
        return requested[start.backfill_id]
    key: GpuKey = (start.node, start.tier, start.gpu)
    if state.holders.get(key, "").startswith("job:"):
        return "preempted"
    if status is not None and status.state == "COMPLETED":
        return "exited"
    return "failed"
