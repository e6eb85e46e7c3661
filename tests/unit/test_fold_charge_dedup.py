"""The fold's charge-id dedup keeps only what can still repeat (SPEC F5).

A charge is called for by a job's event (JobEnded, ReservationReleased with charged_now) and only
while the fold knows the job (jpu.policy.charging.charge_for), so its id can leave the dedup set
when the job leaves the hot state. The labs' initial charges stay (one per lab, ever).
"""

from __future__ import annotations

import random

import msgspec

from jpu.bus import Delivered
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.codec import assign, pack, unpack
from jpu.events import UsageCharged, new_event_id, subject_for
from jpu.policy.charging import charge_id
from jpu.sim.params import SimParams
from jpu.sim.workload import WorkloadJob
from jpu.testing.fold import as_log
from jpu.testing.pg_fixtures import sample_log
from jpu.testing.workloads import CLUSTER, simulated_log


def _sim_log(n_jobs: int) -> list[Delivered]:
    rng = random.Random(11)
    jobs = [
        WorkloadJob(id=f"j{i}", lab="ABC"[i % 3], user=f"u{i % 4 + 1}",
                    submit_s=float(30 * i), num_gpus=rng.randint(1, 4),
                    duration_s=float(rng.randint(30, 900)),
                    peak_vram_gb=16.0 if i % 9 == 0 else None,
                    cancel_s=float(30 * i + 200) if i % 11 == 3 else None)
        for i in range(n_jobs)
    ]  # fmt: skip
    return simulated_log(jobs, SimParams(backfill=True, half_life_s=900))


def _held_by_live_jobs(state: ClusterState, log: list[Delivered]) -> bool:
    labs = {
        d.event.event_id for d in log if isinstance(d.event, UsageCharged) and not d.event.job_id
    }
    of_jobs = {c for ids in state.charged_by_job.values() for c in ids}
    return all(j in state.jobs for j in state.charged_by_job) and state.charged_ids == (
        of_jobs | labs
    )


def test_F5_charge_ids_stay_bounded_over_a_long_log() -> None:
    """Thousands of charges, yet the set never holds more than the jobs in flight can repeat."""
    log = _sim_log(1500)
    charges = sum(isinstance(d.event, UsageCharged) for d in log)
    state = ClusterState.new(CLUSTER, keep_ended=False)
    peak_ids = peak_jobs = 0
    for d in log:
        evolve(state, d)
        peak_ids, peak_jobs = max(peak_ids, len(state.charged_ids)), max(peak_jobs, len(state.jobs))
    assert charges > 1000
    assert _held_by_live_jobs(state, log)
    assert peak_ids <= 2 * peak_jobs  # proportional to the work in flight, not to the log
    kept = ClusterState.new(CLUSTER)  # tools keep every ended job, and so every id
    for d in log:
        evolve(kept, d)
    assert len(kept.charged_ids) == charges


def test_F5_a_redelivered_charge_source_is_not_charged_twice() -> None:
    """sample_log's demoted jobs are charged at the demotion (R3) and stay in flight: the same
    release delivered again (same event id, past the stream's de-duplication window) owes
    nothing — before and after a snapshot — while its job is live; once the job has left the
    hot state, nothing of it can be charged again either."""
    events = sample_log(60)
    for i, e in enumerate(events):  # as accounting writes them: the id is the source's
        if isinstance(e, UsageCharged):
            events[i] = msgspec.structs.replace(e, event_id=charge_id(events[i - 1].event_id))
    log = as_log(events)
    state = ClusterState.new(CLUSTER, keep_ended=False)
    for d in log:
        evolve(state, d)
    demoted = [
        d.event for d in log
        if type(d.event).__name__ == "ReservationReleased" and d.event.charged_now
    ]  # fmt: skip
    live = [e for e in demoted if e.job_id in state.jobs]
    gone = [e for e in demoted if e.job_id not in state.jobs]
    assert live and gone
    assert all(f"chg-{e.event_id}" in state.charged_ids for e in live)
    assert not any(f"chg-{e.event_id}" in state.charged_ids for e in gone)  # left with the job
    _, restored = unpack(pack(state, "JPU", 1.0), CLUSTER)
    held = ClusterState.new(CLUSTER, keep_ended=False)
    assign(held, restored)
    assert held == state
    seq = log[-1].seq
    for s in (state, held):
        for e in [*live, *gone]:
            seq += 1
            evolve(s, Delivered(seq, subject_for(e), e, {}))
        assert s.owed == {}  # nothing owed again: accounting appends no second charge
    # a different release of a live job is a new charge, not a repeat
    fresh = msgspec.structs.replace(live[0], event_id=new_event_id())
    evolve(state, Delivered(seq + 1, subject_for(fresh), fresh, {}))
    assert list(state.owed) == [f"chg-{fresh.event_id}"]
