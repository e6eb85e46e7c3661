"""The invariants of one dispatch cycle's result (SPEC §1.2, §3, §4: no GPU given twice, R1–R3,
R6, D5, D7), asserted by the policy property tests over generated clusters and queues."""

from __future__ import annotations

from jpu.policy import placements
from jpu.policy.demotion import beyond_margin
from jpu.policy.model import CycleResult, Dispatch, ReservationStart, Snapshot
from jpu.policy.ordering import lab_usage_at
from jpu.policy.placements import tier_admits


def check_invariants(snap: Snapshot, res: CycleResult, now: float) -> None:
    """No GPU given twice; only idle/own/just-released GPUs; R1; R2; R3/R6; D5; D7 complete."""
    state = {(g.node, g.tier, g.index): g.state for g in snap.gpus}
    holders = {j.job_id: j for j in snap.queue if j.reservation}
    released = {(r.node, r.tier, i) for r in res.releases for i in r.gpus}
    released |= {(sh.node, sh.tier, i) for sh in res.shrinks for i in sh.removed}  # R5, R6 yield
    seen: set[tuple[str, str, int]] = set()
    given: list[Dispatch | ReservationStart] = [*res.dispatches, *res.starts]
    for d in given:
        for i in d.gpus:
            key = (d.node, d.tier, i)
            assert key not in seen, "a GPU given twice"
            seen.add(key)
            s = state[key]
            own = s == f"reserved:{d.job_id}"
            assert s == "free" or s.startswith("backfill:") or own or key in released
    # R7: a GPU grown onto this cycle and lent in it moves on to the borrower (checked above)
    lent = {(sh.node, sh.tier, i) for sh in res.shrinks if sh.reason == "lent" for i in sh.removed}
    for g in res.grows:
        for i in g.added:
            key = (g.node, g.tier, i)
            assert key not in seen or key in lent
            seen.add(key)
    rank1 = res.order[0] if res.order else None
    strict = snap.reservation_demotion == "strict"
    gone = {r.job_id for r in res.releases if r.reason not in ("dispatched", "swap")}
    parked = set(holders) - gone - {rank1}  # R6: kept below rank 1 (none under strict)
    assert all(s.job_id == rank1 for s in res.starts), "R1"
    assert all(g.job_id == rank1 or g.job_id in parked for g in res.grows), "R1: grows only"
    still = set(holders) - {r.job_id for r in res.releases}
    assert all(s.job_id not in still for s in res.starts), "R2: one reservation per job"
    assert len(res.starts) <= 1
    if strict:
        for j in holders:
            if j != rank1:
                assert j in {r.job_id for r in res.releases}, "R3"
    for sh in res.shrinks:
        if sh.reason == "yielded":  # R6 yield: only below rank 1, never all (that is R3)
            assert snap.reservation_demotion == "yield" and sh.job_id != rank1, "R6 yield"
            assert sh.removed and sh.gpus, "R6 yield: some given back, some kept"
    dispatched = [d.job_id for d in res.dispatches]
    assert set(dispatched).isdisjoint(res.pending)
    assert set(dispatched) | set(res.pending) == set(res.order), "D7: every job has a reason"
    pos = {jid: k for k, jid in enumerate(res.order)}
    walked = [pos[j] for j in dispatched if j != rank1]
    if strict:  # R6: a parked swap gives GPUs back mid-walk; higher ranks then choose again
        assert walked == sorted(walked), "walk in rank order"
    check_parked_d5(snap, res, parked, pos, incumbents(snap, res, parked, now))
    check_dispatch_d5(snap, res, pos)


def incumbents(snap: Snapshot, res: CycleResult, parked: set[str], now: float) -> set[str]:
    """R6: the parked jobs kept within the margin (hysteresis, damped): the reorder does not
    count for them, so they complete in their placement as rank 1's would."""
    if snap.reservation_demotion not in ("hysteresis", "damped") or not res.order:
        return set()
    jobs = {j.job_id: j for j in snap.queue}
    top = jobs[res.order[0]].lab
    out = set()
    for jid in parked:
        lab = jobs[jid].lab
        u = lab_usage_at({lab, top}, snap.usage, now, snap.half_life_s)
        if not beyond_margin(u[lab], u[top], snap.reservation_demotion_margin):
            out.add(jid)
    return out


def check_dispatch_d5(snap: Snapshot, res: CycleResult, pos: dict[str, int]) -> None:
    """D5 for every dispatch, in every mode: no job starts on GPUs of a placement where a job
    ranked above it, left waiting without a reservation (or rank 1, reserving), could have
    started (those GPUs plus what the cycle left idle there, plus rank 1's own). Idle GPUs
    only shrink during a strict walk; under R6 a parked swap gives GPUs back mid-walk, and
    higher ranks must then choose again first. A job demoted at step 3 (R3) that dispatches
    in the walk takes its former GPUs as idle ones: they count as taken, not as its own, or
    what the cycle left idle is counted twice (D5 holds: the higher job could not use them)."""
    after = _idle_after(snap, res)
    cap = {(p.node, p.tier): p.capacity for p in placements(snap.gpus, snap.tiers)}
    started = {s.job_id for s in res.starts}
    waiting = [
        j
        for j in snap.queue
        if j.job_id in res.pending and j.reservation is None and j.job_id not in started
    ]
    # rank 1 left reserving (kept or started this cycle) could also have completed at home
    top: dict[tuple[str, str], int] = {}
    r1 = next((j for j in snap.queue if res.order and j.job_id == res.order[0]), None)
    if r1 is not None and r1.job_id in res.pending and r1.reservation is not None:
        if r1.job_id not in {r.job_id for r in res.releases}:
            kept = [sh for sh in res.shrinks if sh.job_id == r1.job_id]
            held = len(kept[-1].gpus) if kept else len(_own(snap, r1.job_id))
            if not kept or kept[-1].reason != "lent":  # an R7 loan lands after the grow
                held += sum(len(g.added) for g in res.grows if g.job_id == r1.job_id)
            top[(r1.reservation.node, r1.reservation.tier)] = held
            waiting.append(r1)
    elif r1 is not None and r1.job_id in started:
        top = {(s.node, s.tier): len(s.gpus) for s in res.starts}
        waiting.append(r1)
    for d in res.dispatches:
        took = sum(1 for i in d.gpus if (d.node, d.tier, i) not in _own(snap, d.job_id, res))
        t, key = snap.tiers[d.tier], (d.node, d.tier)
        for w in waiting:
            if pos[w.job_id] < pos[d.job_id] and tier_admits(w, t) and w.num_gpus <= cap[key]:
                usable = after[key] + took + (top.get(key, 0) if w is r1 else 0)
                assert w.num_gpus > usable, f"D5: {d.job_id} took what {w.job_id} could use"


def _idle_after(snap: Snapshot, res: CycleResult) -> dict[tuple[str, str], int]:
    """Idle GPUs per placement after the cycle's releases, shrinks, starts, grows, dispatches."""
    after: dict[tuple[str, str], int] = {}
    for p in placements(snap.gpus, snap.tiers):
        after[(p.node, p.tier)] = len(p.idle)
    state = {(g.node, g.tier, g.index): g.state for g in snap.gpus}
    for r in res.releases:  # only what it really held is idle again (not its down GPUs)
        if r.reason != "dispatched":
            back = sum(state[(r.node, r.tier, i)] == f"reserved:{r.job_id}" for i in r.gpus)
            after[(r.node, r.tier)] = after.get((r.node, r.tier), 0) + back
    for sh in res.shrinks:  # R6 yield (and R5): the removed GPUs are idle for others
        if sh.reason == "yielded":
            after[(sh.node, sh.tier)] = after.get((sh.node, sh.tier), 0) + len(sh.removed)
    given: list[Dispatch | ReservationStart] = [*res.dispatches, *res.starts]
    for d in given:
        taken = sum(1 for i in d.gpus if (d.node, d.tier, i) not in _own(snap, d.job_id, res))
        after[(d.node, d.tier)] = after.get((d.node, d.tier), 0) - taken
    for g in res.grows:
        after[(g.node, g.tier)] = after.get((g.node, g.tier), 0) - len(g.added)
    return after


def check_parked_d5(
    snap: Snapshot, res: CycleResult, parked: set[str], pos: dict[str, int], incumbent: set[str]
) -> None:
    """D5 for R6: a parked reservation grows/dispatches only on GPUs that no job still waiting
    above it could start on, even with the parked GPUs released — an incumbent (kept within
    the margin) only on GPUs no such job could start on as they are (D5 as written: the GPUs
    it holds are reserved, R2)."""
    after = _idle_after(snap, res)
    waiting = [j for j in snap.queue if j.job_id in res.pending and j.reservation is None]
    cap = {(p.node, p.tier): p.capacity for p in placements(snap.gpus, snap.tiers)}
    took = [(g.job_id, g.node, g.tier, len(g.gpus)) for g in res.grows if g.job_id in parked]
    took += [(d.job_id, d.node, d.tier, len(d.gpus)) for d in res.dispatches if d.job_id in parked]
    for jid, node, tier_name, n_held in took:
        t = snap.tiers[tier_name]
        for w in waiting:
            if pos[w.job_id] < pos[jid] and tier_admits(w, t):
                usable = after[(node, tier_name)] + (0 if jid in incumbent else n_held)
                assert not (w.num_gpus <= min(usable, cap[(node, tier_name)])), "D5 (R6 parked)"


def _own(snap: Snapshot, job_id: str, res: CycleResult | None = None) -> set[tuple[str, str, int]]:
    """GPUs `job_id` reserved at the cycle's start, less those it yielded in it (R6 yield) or
    lost with a release that did not hand them to it (R3 demotion, R5): a GPU given back and
    taken in again was idle in between, so taking it counts (`_idle_after` counts it idle)."""
    gave = {(sh.node, sh.tier, i) for sh in (res.shrinks if res else ()) for i in sh.removed
            if sh.job_id == job_id}  # fmt: skip
    gave |= {(r.node, r.tier, i) for r in (res.releases if res else ()) for i in r.gpus
             if r.job_id == job_id and r.reason != "dispatched"}  # fmt: skip
    return {(g.node, g.tier, g.index) for g in snap.gpus
            if g.state == f"reserved:{job_id}"} - gave  # fmt: skip
