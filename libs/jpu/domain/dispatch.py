"""The dispatcher's duties (SPEC D1–D8, R3–R5, X8, M2–M3): what a cycle decides on (`snapshot`)
and what the dispatcher appends, as pure functions of (state, config, now) → events, one per duty.
The cycle itself is the policy core (jpu.policy.cycle).

The events carry an empty `event_id`; the writer gives each a deterministic id derived from
(type, subject, expected sequence), so a retried append is de-duplicated by the stream.
"""

from __future__ import annotations

from collections.abc import Mapping

from jpu.config import Cluster, Config, Tier
from jpu.domain.cluster import ClusterState
from jpu.domain.holdings import gpus, running
from jpu.domain.states import PENDING, JobView
from jpu.events import (
    BackfillEnded,
    Event,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobRetryDeclined,
    JobRetryScheduled,
    MaintenanceChanged,
    NodeInventoryObserved,
    ReservationGrown,
    ReservationReleased,
    ReservationShrunk,
    ReservationStarted,
    UsageCharged,
)
from jpu.policy import maintenance, oom
from jpu.policy.charging import with_owed
from jpu.policy.fairshare import held_gpu_seconds
from jpu.policy.labqueues import LabQueues
from jpu.policy.model import (
    CycleResult,
    Gpu,
    MaintenanceState,
    ReservationShrink,
    RunningJob,
    Snapshot,
)
from jpu.policy.release import CHARGED_AT_RELEASE  # R3, M1, R5: charged at release (F4)

DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0
# D8: events after which a cycle may decide differently (plus cancellations for the duties).
TRIGGERS = (
    JobPromoted,
    JobRetryScheduled,
    JobEnded,
    UsageCharged,
    ReservationReleased,
    MaintenanceChanged,
    NodeInventoryObserved,
    BackfillEnded,
    JobCancelRequested,
)


def queue(state: ClusterState) -> LabQueues:
    """The global queue: GLOBAL_QUEUE_WAIT and RESERVING (a cancel request takes a job out),
    kept grouped by lab by the fold itself (`ClusterState.queue`)."""
    return state.queue


def snapshot(
    state: ClusterState,
    config: Cluster,
    half_life_s: float | None = None,
    *,
    gpu_rows: list[Gpu] | None = None,
    running_jobs: list[RunningJob] | None = None,
) -> Snapshot:
    """What the dispatch cycle decides on. `half_life_s` defaults to the config's (F3).

    `gpu_rows` / `running_jobs`: `gpus(state)` / `running(state)` when the caller keeps them
    up to date event by event (the simulator, with `gpu_row` / `running_job`)."""
    half_life = half_life_s or float(getattr(config, "half_life_s", DEFAULT_HALF_LIFE_S))
    maintenance: MaintenanceState = state.maintenance.state  # type: ignore[assignment]
    return Snapshot(
        tiers={t.name: t for t in config.tiers},
        gpus=gpus(state) if gpu_rows is None else gpu_rows,
        queue=queue(state),
        # D1/F4: with every charge the log owes, before accounting has written it
        usage=with_owed(state.usage, state.owed.values(), half_life),
        half_life_s=half_life,
        maintenance=maintenance,
        running=running(state) if running_jobs is None else running_jobs,
        # R6: the configured demotion mode (the simulator passes the same keys, SimParams)
        reservation_demotion=config.reservation_demotion,
        reservation_demotion_margin=config.reservation_demotion_margin,
        reservation_backfill=config.reservation_backfill,  # R7
    )


def duties(state: ClusterState, config: Config, now: float) -> list[Event]:
    """What the dispatcher owes before a cycle, in the order it lands: queued jobs whose cancel
    was requested end (R5), OOM retries are decided once (X8), maintenance takes its next step
    (M2/M3)."""
    tiers = {t.name: t for t in config.tiers}
    out = cancellations(state, tiers, now) + escalations(state, config, now)
    step = maintenance_step(state, now)
    return out if step is None else [*out, step]


def cycle_events(result: CycleResult, tiers: Mapping[str, Tier], now: float) -> list[Event]:
    """D3 decisions in the order they must land: releases free GPUs before anything takes them.
    Shrinks (R5 lost, R6 yielded) come first: they are decided in the release phase, before the
    walk may release the rest of the same reservation (dispatch, swap, demotion); after such a
    release the fold would drop them, and their held time with them (F5). R7 loans land after
    the grows, before the dispatches (`jpu.policy.walk.Walk.lend`)."""
    out: list[Event] = []
    first = [sh for sh in result.shrinks if sh.reason != "lent"]
    lent = [sh for sh in result.shrinks if sh.reason == "lent"]
    for sh in first:  # R5/R6: decided first, land first
        out.append(_shrunk(sh, now))
    for r in result.releases:
        tier = tiers.get(r.tier)
        out.append(
            ReservationReleased(
                event_id="",
                ts=now,
                job_id=r.job_id,
                node=r.node,
                tier=r.tier,
                gpus=list(r.gpus),
                reason=r.reason,
                gpu_seconds=r.gpu_seconds,
                charged_now=r.reason in CHARGED_AT_RELEASE,
                tflops=tier.tflops if tier is not None else 0.0,
            )
        )
    for s in result.starts:
        out.append(
            ReservationStarted(
                event_id="", ts=now, job_id=s.job_id, node=s.node, tier=s.tier, gpus=list(s.gpus)
            )
        )
    for g in result.grows:
        out.append(
            ReservationGrown(
                event_id="",
                ts=now,
                job_id=g.job_id,
                node=g.node,
                tier=g.tier,
                gpus=list(g.gpus),
                added=list(g.added),
            )
        )
    # R7: a loan after the grows (rank 1 lends what it held and what it grew onto this cycle,
    # so the shrink names GPUs the grow added) and before the borrower's dispatch
    out.extend(_shrunk(sh, now) for sh in lent)
    for d in result.dispatches:
        out.append(
            JobDispatched(
                event_id="",
                ts=now,
                job_id=d.job_id,
                attempt=d.attempt,
                node=d.node,
                tier=d.tier,
                gpus=list(d.gpus),
            )
        )
    return out


def _shrunk(sh: ReservationShrink, now: float) -> ReservationShrunk:
    return ReservationShrunk(
        event_id="",
        ts=now,
        job_id=sh.job_id,
        node=sh.node,
        tier=sh.tier,
        gpus=list(sh.gpus),
        removed=list(sh.removed),
        gpu_seconds=sh.gpu_seconds,
        tflops=sh.tflops,
        reason=sh.reason,
        lent_to=sh.lent_to,
        until=sh.until,
    )


def cancellation(job: JobView, tiers: Mapping[str, Tier], now: float) -> list[Event]:
    """A queued job whose cancel was requested ends here (running ones: the slurm-agent).

    Its reservation is released uncharged and the held time is charged with the job's end (R5)."""
    out: list[Event] = []
    gpu_s, usage, tflops = job.uncharged_reserved_gpu_s, job.uncharged_reserved_usage, 0.0
    r = job.reservation
    if r is not None:
        tier = tiers.get(r.tier)
        tflops = tier.tflops if tier is not None else 0.0
        held = held_gpu_seconds(r, now)
        gpu_s, usage = gpu_s + held, usage + held * tflops
        out.append(
            ReservationReleased(
                event_id="",
                ts=now,
                job_id=job.job_id,
                node=r.node,
                tier=r.tier,
                gpus=list(r.gpus),
                reason="cancelled",
                gpu_seconds=held,
                charged_now=False,
                tflops=tflops,
            )
        )
    out.append(
        JobEnded(
            event_id="",
            ts=now,
            job_id=job.job_id,
            attempt=job.attempt,
            state="CANCELLED",
            gpu_seconds_reserved=gpu_s,
            tflops=tflops,
            usage=usage,
            reason="cancelled",
        )
    )
    return out


def cancellations(state: ClusterState, tiers: Mapping[str, Tier], now: float) -> list[Event]:
    return [
        e
        for j in state.jobs.values()
        if j.state == "CANCELLING" and j.placement is None and j.cancel_from in PENDING
        for e in cancellation(j, tiers, now)
    ]


def escalations(state: ClusterState, config: Config, now: float) -> list[Event]:
    """SPEC X8: a GPU OOM retries with more VRAM (queue_entered_at kept) or stays FAILED (OOM);
    either way the decision is recorded, so it is taken once and never revisited."""
    tiers = {t.name: t for t in config.tiers}
    pool = gpus(state)
    out: list[Event] = []
    for j in state.jobs.values():
        if not j.oom_pending or j.last_end is None:
            continue
        tier = tiers.get(j.last_end.tier or "")
        vram = tier.vram_gb if tier is not None else (j.min_vram_gb or 0)
        verdict = oom.escalate(
            j.attempt, vram, pool, tiers, j.num_gpus, j.tiers, config.max_attempts
        )
        if isinstance(verdict, oom.Retry):
            out.append(
                JobRetryScheduled(
                    event_id="",
                    ts=now,
                    job_id=j.job_id,
                    attempt=verdict.attempt,
                    min_vram_gb=verdict.min_vram_gb,
                )
            )
        else:
            out.append(
                JobRetryDeclined(
                    event_id="",
                    ts=now,
                    job_id=j.job_id,
                    attempt=j.attempt,
                    reason=verdict.why,
                    needed_vram_gb=verdict.needed_vram_gb,
                )
            )
    return out


def maintenance_step(state: ClusterState, now: float) -> MaintenanceChanged | None:
    """SPEC M2/M3: DRAINING → BACKFILL_RECOVERY → ACTIVE, one event per step."""
    current: MaintenanceState = state.maintenance.state  # type: ignore[assignment]
    nxt = maintenance.advance(current, state.busy_user_jobs(), state.active_backfills())
    if nxt == current:
        return None
    return MaintenanceChanged(
        event_id="", ts=now, state=nxt, by="dispatcher", message=state.maintenance.message
    )
