"""Phase 4 of the cycle (SPEC D3.4): walk the queue from rank 1 and decide, plus pending reasons.

Under strict R3 only rank 1 can hold a reservation here (phase 3 released all others) and only
rank 1 may start one (R1). Every later job can only dispatch (D3.a) or wait (D3.d). A damped
demotion mode (R6) may keep ("park") reservations of lower jobs: the walk skips them (their GPUs
are not idle for anyone, R2) and only after it lets them absorb GPUs of their own placement that
it left idle — GPUs no job of the queue could start on this cycle (D5) — and dispatch once
complete. Since GPUs are only taken
during the walk after rank 1, a request class that cannot be served stays so for the rest of the
cycle: the walk jumps from one servable job to the next with a C-level `list.index` per class,
and the cost does not grow with the number of waiting jobs it passes (D5 holds by construction:
every job skipped could not use any idle GPU at that point).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jpu.policy.demotion import DemotionCheck
from jpu.policy.lend import lend_order, lent_shrink, may_borrow, shadow_time, with_grown
from jpu.policy.model import (
    CycleResult,
    Dispatch,
    PendingReason,
    QueuedJob,
    ReservationGrow,
    ReservationStart,
    RunningJob,
)
from jpu.policy.pending import Pending
from jpu.policy.placements import Slot, fits
from jpu.policy.pool import Levels, Pool
from jpu.policy.release import Kept, release
from jpu.policy.view import AnyView


def dispatch_of(job: QueuedJob, slot: Slot, gpus: Sequence[int]) -> Dispatch:
    chosen = tuple(sorted(gpus))
    bf = slot.backfill
    return Dispatch(
        job_id=job.job_id,
        lab=job.lab,
        node=slot.node,
        tier=slot.tier,
        gpus=chosen,
        attempt=job.attempt,
        preempt_backfill=tuple(bf[g] for g in chosen if g in bf),  # B2
    )


def _rank(pair: tuple[int, Dispatch]) -> int:
    return pair[0]


class Walk:
    def __init__(self, pool: Pool, view: AnyView, now: float, out: CycleResult):
        self.pool = pool
        self.view = view
        self.now = now
        self.out = out
        self.dispatched: list[int] = []  # ranks (0-based) dispatched this cycle
        self.reserving = False  # rank 1 holds a reservation after this cycle
        self.parked: dict[str, Kept] = {}  # R6: kept reservations of jobs below rank 1
        self.held_ranks: dict[int, PendingReason] = {}  # their ranks → "Reservation" (D7)
        self.top: tuple[Slot, int] | None = None  # rank 1 reserving: its placement, GPUs held
        # R7 (`reservation_backfill: limit`): the running jobs the shadow time is computed from;
        # None: off. `lender`: rank 1's kept reservation, the GPUs it held at the cycle's start
        # and those it grew by this cycle
        self.running: Sequence[RunningJob] | None = None
        self.lender: tuple[QueuedJob, Slot, list[int], tuple[int, ...]] | None = None

    def run(
        self,
        kept: Kept | None,
        *,
        reservations: bool = True,
        parked: Sequence[Kept] = (),
        check: DemotionCheck | None = None,
    ) -> None:
        """`reservations=False` is plain greedy in queue order (the FIFO baseline).
        `parked`/`check` (R6): reservations a damped mode kept below rank 1, and its check."""
        self.parked = {p[0].job_id: p for p in parked}
        self.check = check
        pool = self.pool
        baseline = dict(pool.max_idle)
        if kept is not None:  # its reserved GPUs count for D7 "Priority" of lower jobs
            _, s, held = kept
            baseline[s.tier] = max(baseline.get(s.tier, 0), len(s.idle) + len(held))
        view = self.view
        self.classes = view.classes
        self.classes.baseline = baseline
        self.present = view.present
        if len(view) and reservations:
            self.rank1(view.cid_rank[0], kept)
            self.rest(view.cid_rank, 1)
            self.lend()
            self.grow_parked()
        elif len(view):
            self.rest(view.cid_rank, 0)
        self.pending()

    def dispatch(self, job: QueuedJob, slot: Slot, gpus: Sequence[int]) -> None:
        self.out.dispatches.append(dispatch_of(job, slot, gpus))

    def at_home(self, rank: int, job: QueuedJob, own: Slot, held: Sequence[int], need: int) -> None:
        """D3.b complete: dispatched on its reservation; the held time rides with the attempt."""
        self.out.releases.append(release(job, "dispatched", self.now, self.pool.tiers))
        self.dispatch(job, own, [*held, *self.pool.take(own, need)])
        self.dispatched.append(rank)

    def swap(self, rank: int, job: QueuedJob, own: Slot, held: Sequence[int], to: Slot) -> None:
        """D3.a elsewhere (R4): released uncharged, held time charged lazily; GPUs given back."""
        pool = self.pool
        self.out.releases.append(release(job, "swap", self.now, pool.tiers))
        self.dispatch(job, to, pool.take(to, job.num_gpus))
        own.reserved.pop(job.job_id, None)
        pool.give(own, held)
        self.dispatched.append(rank)

    def grow(self, job: QueuedJob, own: Slot, held: Sequence[int], need: int) -> tuple[int, ...]:
        """D3.b: absorb idle GPUs of its own placement (up to what it still needs)."""
        added = self.pool.take(own, need)
        self.out.grows.append(
            ReservationGrow(
                job_id=job.job_id, node=own.node, tier=own.tier, gpus=(*held, *added), added=added
            )
        )
        return added

    def rank1(self, c: int, kept: Kept | None) -> None:
        job, pool, k = self.view.job(0), self.pool, self.classes[c]
        if kept is not None:
            job, own, held = kept  # the kept record: its reservation may have shrunk (R5)
            need = max(0, job.num_gpus - len(held))
            if len(own.idle) >= need:  # D4: own placement preferred whenever available
                self.at_home(0, job, own, held, need)
                return
            other = pool.best_fit(k.levels, job.num_gpus)
            if other is not None:
                self.swap(0, job, own, held, other)
                return
            grown = self.grow(job, own, held, need) if own.idle else ()
            self.reserving, self.top = True, (own, len(held) + len(grown))
            self.lender = (job, own, list(held), grown)
            return
        slot = pool.best_fit(k.levels, job.num_gpus)
        if slot is not None:  # D3.a
            self.dispatch(job, slot, pool.take(slot, job.num_gpus))
            self.dispatched.append(0)
        elif job.num_gpus >= 2:  # D3.c, R1: only rank 1, only multi-GPU
            slot = pool.most_idle(k.levels, job.num_gpus, self.parked_gpus())
            if slot is not None:
                gpus = pool.take(slot, job.num_gpus)
                self.out.starts.append(
                    ReservationStart(job_id=job.job_id, node=slot.node, tier=slot.tier, gpus=gpus)
                )
                self.reserving, self.top = True, (slot, len(gpus))

    def lend(self) -> None:
        """SPEC R7 after the walk: lower jobs, in rank order, whose time limit ends by rank 1's
        shadow time start on GPUs its reservation holds or waits for: those it held at the
        cycle's start and those it grew onto in this cycle (jpu.policy.lend). They leave the
        reservation (`lent`, landing after the grow), which grows back onto them once idle."""
        if self.running is None or self.lender is None or 0 in self.dispatched:
            return
        job, own, held, grown = self.lender
        r = job.reservation
        if not (held or grown) or r is None:
            return
        now, view = self.now, self.view
        shadow = shadow_time(job, own, len(held) + len(grown), self.running, now)
        if shadow == float("inf") or shadow <= now:
            return  # unknown: a loan might delay it (D5); or it can start now
        job = with_grown(job, grown, now)  # the reservation as this cycle's grow leaves it
        tier = self.pool.tiers[own.tier]
        free = lend_order(job.reservation or r, [*held, *grown], own.backfill)
        done = set(self.dispatched)
        lent = False
        classes, cids = self.classes, view.cid_rank
        room = min(len(free), own.capacity)  # request classes that could fit the loan at all
        sizes = {c: classes[c].n for c in self.present if own.tier in classes[c].flat}
        sizes = {c: n for c, n in sizes.items() if n <= room}
        for i in range(1, len(view)):
            n = sizes.get(cids[i], 0)
            if not n or n > len(free) or i in done:
                continue  # cheap per rank: the job itself is read only for a possible loan
            cand = view.job(i)
            if not may_borrow(cand, now, shadow) or not fits(cand, own, tier):
                continue
            gpus, free = free[:n], free[n:]
            shrink, job = lent_shrink(job, gpus, cand.job_id, shadow, tier.tflops, now)
            self.out.shrinks.append(shrink)
            self.dispatch(cand, own, gpus)
            self.dispatched.append(i)
            lent = True
            if not free:
                break
        if lent and len(self.dispatched) == len(self.out.dispatches):  # the log in rank order
            ranked = sorted(zip(self.dispatched, self.out.dispatches, strict=True), key=_rank)
            self.dispatched = [k for k, _ in ranked]
            self.out.dispatches = [d for _, d in ranked]

    def parked_gpus(self) -> dict[tuple[str, str], int]:
        """R6: GPUs parked reservations hold, per placement (not capacity for a new one)."""
        out: dict[tuple[str, str], int] = {}
        for _, s, held in self.parked.values():
            out[(s.node, s.tier)] = out.get((s.node, s.tier), 0) + len(held)
        return out

    def rest(self, cid: list[int], start: int) -> None:
        """Ranks start+1..N: dispatch (D3.a) in rank order whatever is available, skip the rest."""
        pool, classes, total = self.pool, self.classes, len(cid)

        def next_of(c: int, at: int) -> int:
            try:
                return cid.index(c, at)
            except ValueError:
                return total

        alive: dict[int, int] = {}
        for c in self.present:
            k = classes[c]
            if pool.can_serve(k.flat, k.n) and (i := next_of(c, start)) < total:
                alive[c] = i
        parked = self.parked
        while alive:
            c = min(alive, key=alive.__getitem__)
            i, k = alive[c], classes[c]
            job = self.view.job(i)
            if parked and job.job_id in parked:  # R6: a parked reservation at its rank
                freed = self.parked_dispatch(i, job, k.levels)
                alive[c] = next_of(c, i + 1)
                if alive[c] >= total:
                    del alive[c]
                if freed:  # its GPUs are idle again: classes dropped may be servable now
                    self.rank1_first()
                    self.revive(alive, cid, start, next_of)
                # after rank 1 chose again: what it took may leave a class with no placement
                # (the property test found a class kept alive here and then no slot for it)
                for c2 in list(alive):
                    k2 = classes[c2]
                    if not pool.can_serve(k2.flat, k2.n):
                        del alive[c2]
                continue
            slot = pool.best_fit(k.levels, k.n)
            assert slot is not None  # alive ⇒ servable
            top = pool.max_idle[slot.tier]
            self.dispatch(job, slot, pool.take(slot, k.n))
            self.dispatched.append(i)
            alive[c] = next_of(c, i + 1)
            if alive[c] >= total:
                del alive[c]
            if pool.max_idle[slot.tier] == top:
                continue  # no class lost its last servable placement
            for c2 in list(alive):
                k2 = classes[c2]
                if not pool.can_serve(k2.flat, k2.n):
                    del alive[c2]

    def parked_dispatch(self, i: int, job: QueuedJob, levels: Levels) -> bool:
        """R6, D3.a/b for a parked job reached in rank order while its class is servable: its
        own placement if complete there (D4) and no higher waiting job could start there were
        it released (D5), else the best fit elsewhere as a swap (R4). True if GPUs were freed."""
        pool, check = self.pool, self.check
        job, own, held = self.parked.pop(job.job_id)  # the kept record: it may have shrunk (R5,
        # R6 yield); the queue's copy still names the GPUs it gave back (F5: charged twice)
        need = max(0, job.num_gpus - len(held))
        if len(own.idle) >= need and not (
            check is not None and check.holds_back(job, own, held, self.dispatched)
        ):
            self.at_home(i, job, own, held, need)
            return False
        # a swap goes elsewhere: its own placement's idle GPUs are what the higher job waits
        # for with the reserved ones (D5); it never "swaps" onto them (the R6 property test
        # found one releasing GPU 0 of a placement and dispatched on GPUs 1-2 of the same one)
        slot = next((s for s in pool.candidates(levels, job.num_gpus) if s is not own), None)
        if slot is None:  # fits only at home, where a higher job could start with its GPUs and
            # nowhere else (holds_back): `useful` (and `yield`, whose partial give-back is made
            # at the cycle's start only) demotes now, with the walk's pool (R3, R6)
            self.out.releases.append(release(job, "demoted", self.now, pool.tiers))
            own.reserved.pop(job.job_id, None)
            pool.give(own, held)
            return bool(held)
        self.swap(i, job, own, held, slot)
        return bool(held)

    def rank1_first(self) -> None:
        """D5 after a parked swap gave GPUs back mid-walk: rank 1, walked first, chooses first
        again. Without a reservation it dispatches if it now can (D3.a). Reserving, it has
        decided this cycle (started, grown): the GPUs it could now use — what it still needs
        of its own placement, or a whole placement that fits it — are kept from the lower jobs
        for this cycle only (nothing is recorded; the next cycle gives them to it)."""
        if not len(self.view) or 0 in self.dispatched:
            return
        pool, job = self.pool, self.view.job(0)
        k = self.classes[self.view.cid_rank[0]]
        if self.top is None:
            slot = pool.best_fit(k.levels, job.num_gpus)
            if slot is not None:
                self.dispatch(job, slot, pool.take(slot, job.num_gpus))
                self.dispatched.append(0)
            return
        own, held = self.top
        if held >= job.num_gpus:
            return  # what it can use is already kept (a whole placement, or all it needs)
        kept = len(pool.take(own, job.num_gpus - held)) if own.idle else 0
        slot = pool.best_fit(k.levels, job.num_gpus)
        if slot is not None and slot is not own:
            pool.take(slot, job.num_gpus)
            kept = job.num_gpus
        self.top = (own, held + kept)  # a later swap in the same walk adds only what is missing

    def rank_of(self, job_id: str) -> int:
        check = self.check
        return check.rank_of(job_id) if check is not None else self.view.order.index(job_id)

    def revive(
        self, alive: dict[int, int], cid: list[int], start: int, next_of: Callable[[int, int], int]
    ) -> None:
        """After a parked swap gave GPUs back: every class servable again resumes at its first
        job not yet dispatched (min index first, so higher ranks still choose first: D5)."""
        pool, classes, total = self.pool, self.classes, len(cid)
        done = set(self.dispatched)
        for c in self.present:
            if c in alive:
                continue
            k = classes[c]
            if not pool.can_serve(k.flat, k.n):
                continue
            j = next_of(c, start)
            while j < total and j in done:
                j = next_of(c, j + 1)
            if j < total:
                alive[c] = j

    def grow_parked(self) -> None:
        """R6: parked reservations, in rank order, absorb what the walk left idle in their own
        placement (D3.b); complete → dispatch there — unless a waiting job ranked above could
        start there if the reservation were released (D5: it never jumps ahead of one)."""
        check = self.check
        for job, own, held in self.parked.values():
            need = max(0, job.num_gpus - len(held))
            if own.idle and check is not None and check.holds_back(job, own, held, self.dispatched):
                self.held_ranks[self.rank_of(job.job_id)] = "Reservation"
                continue
            if len(own.idle) >= need:
                self.at_home(self.rank_of(job.job_id), job, own, held, need)
                continue
            if own.idle:
                self.grow(job, own, held, need)
            self.held_ranks[self.rank_of(job.job_id)] = "Reservation"

    def pending(self) -> None:
        """SPEC D7 for every job not dispatched: its class's reason, looked up lazily."""
        classes, view = self.classes, self.view
        reasons = {c: classes[c].reason for c in self.present}
        first: PendingReason | None = "Reservation" if self.reserving else None
        self.out.pending = Pending(
            view.order,
            view.cid_rank,
            reasons,
            self.dispatched,
            first,
            self.held_ranks,
        )
