"""The queue as it stood at a past moment (`GET /v1/queue?at=TIME`, SPEC F5). Pure.

The log is folded (`jpu.domain.cluster.evolve`) up to the first event after TIME — the same prefix
`EventBus.replay(until_ts=TIME)` yields — and the dispatcher's cycle (`jpu.policy.cycle` on
`jpu.domain.dispatch.snapshot`) run at TIME gives ranks and pending reasons (D1, D7).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from jpu.config import Cluster
from jpu.domain.cluster import ClusterState, evolve
from jpu.domain.dispatch import DEFAULT_HALF_LIFE_S, snapshot
from jpu.domain.promotion import personal_standing  # D7 in the personal queue (Q5, Q7-Q9)
from jpu.domain.states import PLACED, JobView
from jpu.events import Delivered
from jpu.policy.cycle import cycle
from jpu.policy.fairshare import ZERO_USAGE, decayed


class Held(msgspec.Struct, kw_only=True):
    """GPUs of one placement: a reservation (with `since`) or a running job's placement."""

    node: str
    tier: str
    gpus: list[int]
    since: float | None = None


class PastEntry(msgspec.Struct, kw_only=True):
    rank: int | None
    job_id: str
    name: str
    lab: str
    user: str
    num_gpus: int
    state: str
    attempt: int
    lab_usage: float
    queue_entered_at: float | None
    submitted_at: float
    pending_reason: str | None
    reservation: Held | None = None
    placement: Held | None = None


class PastQueue(msgspec.Struct, kw_only=True):
    at: float
    seq: int  # the last stream sequence folded
    maintenance: str
    half_life_s: float
    global_length: int
    personal_length: int
    running_length: int
    queue: list[PastEntry]  # global queue by rank, then personal queues
    running: list[PastEntry]


def fold_until(
    events: Iterable[Delivered], at: float, cluster: Cluster, state: ClusterState | None = None
) -> ClusterState:
    """The fold of the log's prefix before its first event after `at`."""
    st = state if state is not None else ClusterState.new(cluster, keep_ended=False)
    for d in events:
        if d.event.ts > at:
            break
        evolve(st, d)
    return st


def _entry(j: JobView, rank: int | None, reason: str | None, usage: float) -> PastEntry:
    r = j.reservation
    return PastEntry(
        rank=rank,
        job_id=j.job_id,
        name=j.name,
        lab=j.lab,
        user=j.user,
        num_gpus=j.num_gpus,
        state=j.state,
        attempt=j.attempt,
        lab_usage=usage,
        queue_entered_at=j.queue_entered_at,
        submitted_at=j.submitted_at,
        pending_reason=reason,
        reservation=None
        if r is None
        else Held(node=r.node, tier=r.tier, gpus=list(r.gpus), since=r.since),
        placement=None
        if j.placement is None
        else Held(node=j.placement[0], tier=j.placement[1], gpus=list(j.placement[2])),
    )


def queue_at(
    state: ClusterState, at: float, cluster: Cluster, half_life_s: float | None = None
) -> PastQueue:
    """Ranks and reasons of the cycle at `at` on the folded `state` (D1, D7)."""
    hl = half_life_s or float(getattr(cluster, "half_life_s", DEFAULT_HALF_LIFE_S))
    snap = snapshot(state, cluster, hl)
    result = cycle(snap, at)

    def usage(lab: str) -> float:
        return decayed(snap.usage.get(lab, ZERO_USAGE), at, hl)

    ranked = [
        _entry(state.jobs[jid], i + 1, result.pending.get(jid), usage(state.jobs[jid].lab))
        for i, jid in enumerate(result.order)
    ]
    personal = [
        _entry(
            state.jobs[jid],
            None,
            personal_standing(state, cluster, state.jobs[jid])[0],
            usage(state.jobs[jid].lab),
        )
        for user in sorted(state.personal)
        for jid in state.personal[user]
    ]
    running = sorted(
        (
            _entry(j, None, None, usage(j.lab))
            for j in state.jobs.values()
            if j.state in PLACED and j.placement is not None
        ),
        key=lambda e: (e.submitted_at, e.job_id),
    )
    return PastQueue(
        at=at,
        seq=state.seq,
        maintenance=state.maintenance.state,
        half_life_s=hl,
        global_length=len(ranked),
        personal_length=len(personal),
        running_length=len(running),
        queue=ranked + personal,
        running=running,
    )
