"""How R3 demotes (SPEC R6): does a reserving job that is no longer rank 1 lose its reservation?

This is the one place that decides it; the cycle (release phase) asks it for every reserving job
that is not rank 1 and still fits its placement. Modes (`reservation_demotion`):

- `strict` — SPEC R3 exactly: every such job is demoted.
- `useful` — demoted only if some job ranked above it could start on the reserved GPUs this
  cycle and on no others: its tier admits that job, the placement's capacity fits it, the
  placement's idle GPUs plus the reserved ones are enough, and no placement has enough idle GPUs
  for it once the jobs ranked above it took theirs (`race`, D5). Otherwise releasing would help
  no higher job, and the reservation is kept.
- `hysteresis` — demoted only if rank 1's lab has a decayed usage below the reserving lab's by
  more than `margin` (a fraction of the reserving lab's): small reorders among labs of nearly
  equal usage no longer throw the gathered GPUs away.
- `damped` — both conditions must hold.
- `yield` — partial demotion: the job gives back only the reserved GPUs that higher jobs could
  start on this cycle and on no other placement (`useful`'s test, counted GPU by GPU, in rank
  order), and keeps the rest parked. Demoted (R3) only when they need all of its GPUs. The
  yielded GPUs' held time rides with the attempt (R5's shrink, charged at its end: F4).

A kept reservation of a job that is not rank 1 is "parked" (walk.py): its GPUs stay non-idle for
everyone else (R2), it starts no new reservation (R1) and it grows only on GPUs the walk left
idle. Trade-offs are written up in docs/reservations.md.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from itertools import groupby

import msgspec

from jpu.config import DEFAULT_DEMOTION_MARGIN, DEMOTION_MODES, DemotionMode, Tier
from jpu.policy.classes import ClassTable, Req
from jpu.policy.model import LabUsage, QueuedJob
from jpu.policy.ordering import lab_usage_at
from jpu.policy.placements import Slot, tier_admits
from jpu.policy.pool import Pool

__all__ = ["DEMOTION_MODES", "STRICT", "Demotion", "DemotionCheck", "DemotionMode", "beyond_margin"]


class Demotion(msgspec.Struct, frozen=True, gc=False):
    """The R6 setting as the cycle reads it (from `Config.reservation_demotion[_margin]`)."""

    mode: DemotionMode = "strict"
    margin: float = (
        DEFAULT_DEMOTION_MARGIN  # hysteresis / damped: fraction of the reserving lab's usage
    )


STRICT = Demotion()


def beyond_margin(reserving: float, top: float, margin: float) -> bool:
    """Hysteresis: rank 1's lab usage `top` is below the reserving lab's by more than `margin`."""
    return top < reserving * (1.0 - margin)


class DemotionCheck:
    """One cycle's R6 decision. `pool` must be indexed (idle at the start of the cycle);
    `order`/`cid_rank` are the cycle's rank order (D1) and class of each rank."""

    def __init__(
        self,
        rule: Demotion,
        *,
        order: Sequence[str],
        cid_rank: list[int],
        present: Collection[int],
        holders: Collection[str],
        classes: ClassTable,
        pool: Pool,
        usage: Mapping[str, LabUsage],
        tiers: Mapping[str, Tier],
        now: float,
        half_life_s: float,
    ) -> None:
        self.rule = rule
        self.order, self.cid_rank, self.classes = order, cid_rank, classes
        self.pool, self.usage, self.tiers = pool, usage, tiers
        self.now, self.half_life_s = now, half_life_s
        self._flat: dict[int, tuple[Req, list[str]]] = {}
        self._first: dict[int, int] = {}  # class -> its first rank (C-level list.index)
        self.present = present
        self.holders = holders
        self._ranks: dict[str, int] | None = None
        # kept because the usage gap to rank 1 is within the margin (hysteresis, damped)
        self.incumbents: set[str] = set()
        self._race: Race | None = None  # the higher jobs competing for idle GPUs (D5)

    def demote(self, job: QueuedJob, rank1: QueuedJob, slot: Slot, held: Sequence[int]) -> bool:
        """SPEC R3/R6: `job` (not rank 1) reserving `held` GPUs in `slot` loses them."""
        mode = self.rule.mode
        if mode == "strict":
            return True
        if mode in ("hysteresis", "damped"):
            u = lab_usage_at({job.lab, rank1.lab}, self.usage, self.now, self.half_life_s)
            if not beyond_margin(u[job.lab], u[rank1.lab], self.rule.margin):
                self.incumbents.add(job.job_id)
                return False
        if mode in ("useful", "damped"):
            return self.higher_can_use(job, slot, held, start=True)
        return True

    def give_back(self, job: QueuedJob, rank1: QueuedJob, slot: Slot, held: Sequence[int]) -> int:
        """SPEC R3/R6: how many of the `held` GPUs `job` (not rank 1) gives back this cycle:
        0 keeps the reservation, all of them demotes it (R3), fewer yields them (`yield`)."""
        if self.rule.mode != "yield":
            return len(held) if self.demote(job, rank1, slot, held) else 0
        return min(len(held), self.needed_by_higher(job, slot, held))

    def needed_by_higher(self, job: QueuedJob, slot: Slot, held: Sequence[int]) -> int:
        """`yield`: how many of the `held` GPUs the jobs ranked above `job` would take, in rank
        order, that can start on this placement now (its idle GPUs and these, plus their own
        reservation here) and on no other (pool as it is). Greedy by rank: each takes what it
        needs while enough is left, as the walk would hand them out (D5). Idle GPUs go first."""
        tier = self.tiers.get(slot.tier)
        if tier is None:
            return len(held)
        rank = self.rank_of(job.job_id)
        idle = len(slot.idle)
        race = self.race()
        # the higher jobs that would start on this placement's idle GPUs take them first (D5)
        ranks = [(at, n) for at, n in race.onto.get((slot.node, slot.tier), ()) if at < rank]
        for cid in self.present:  # per request class (a handful), not per job
            req, _ = self._class(cid)
            n = req.num_gpus
            if n > slot.capacity or not tier_admits(req, tier):
                continue
            # each candidate takes ≥ 1 GPU: more than `capacity` of a class cannot all start
            at = race.waits_from.get(cid, rank)  # the first its higher jobs leave waiting
            for _ in range(slot.capacity + 1):
                try:
                    at = self.cid_rank.index(cid, at, rank)
                except ValueError:
                    break
                ranks.append((at, n))
                at += 1
        # parked reservations here of jobs ranked below this one give theirs first: counting
        # them, two parked jobs that together hold what a higher job needs here do not each
        # keep theirs because neither alone is enough (the two and rank 1 would wait forever)
        below = sum(
            len(g)
            for j, g in slot.reserved.items()
            if j != job.job_id and j in self.holders and self.rank_of(j) > rank
        )
        left, taken = idle + below + len(held), 0
        for at, n in sorted(ranks):
            need = n - len(slot.reserved.get(self.order[at], ()))  # its own GPUs here (D2)
            if 0 < need <= left:
                left -= need
                taken += need
        return min(len(held), max(0, taken - idle - below))

    def holds_back(
        self, job: QueuedJob, slot: Slot, held: Sequence[int], dispatched: Sequence[int] = ()
    ) -> bool:
        """D5 for a parked reservation that could grow or complete in its placement: it waits
        while a higher job could start there were it released. Not an incumbent (kept by the
        margin): the near-tie reorder does not count for it, so it goes on as rank 1's would.
        Otherwise rank 1, which cannot reserve the GPUs it holds, and it, waiting for rank 1,
        would wait for each other for as long as the two labs' usage ratio stays (decay keeps
        it), and nothing would ever run there."""
        if job.job_id in self.incumbents:
            return False
        return self.higher_can_use(job, slot, held, dispatched)

    def higher_can_use(
        self,
        job: QueuedJob,
        slot: Slot,
        held: Sequence[int],
        dispatched: Sequence[int] = (),
        *,
        start: bool = False,
    ) -> bool:
        """Some job ranked above `job` (not among the `dispatched` ranks) could start on the
        placement's idle and reserved GPUs now, and on no other placement (pool as it is).
        At the `start` of the cycle "no other" counts the jobs ranked above it first (D5): two
        higher jobs that each fit in the same idle GPUs do not both start there."""
        tier = self.tiers.get(slot.tier)
        if tier is None:
            return True
        rank = self.rank_of(job.job_id)
        # a higher job reserving in the same placement would add its own GPUs (D2): count the
        # largest other reservation there (an over-estimate: errs towards R3)
        others = max((len(g) for j, g in slot.reserved.items() if j != job.job_id), default=0)
        usable = len(slot.idle) + len(held) + others
        done = set(dispatched)
        for cid in self.present:  # per request class (a handful), not per job
            req, flat = self._class(cid)
            n = req.num_gpus
            if n > usable or n > slot.capacity or not tier_admits(req, tier):
                continue
            if start:  # the first job of the class that the higher ones leave waiting
                if self.race().waits_from.get(cid, rank) < rank:
                    return True
                continue
            if self.pool.can_serve(flat, n):  # it can start elsewhere: the GPUs are not needed
                continue
            if self._first_waiting(cid, done, rank) < rank:
                return True
        return False

    def race(self) -> Race:
        """D3.4 run on a copy of the start-of-cycle pool with every reservation kept, in rank
        order, by class (a holder that cannot start on idle GPUs waits; rank 1 reserves):
        where each higher job would start and, per class, the first rank left waiting. A class
        "can start elsewhere" only if its jobs still can once the jobs above them took theirs —
        per class on the pool as it is, two 2-GPU jobs above a parked GPU each saw the same 3
        idle GPUs, it was kept, and a lower 1-GPU job took the third ahead of the second."""
        if self._race is not None:
            return self._race
        slots = {k: _copy(s) for k, s in self.pool.slots.items()}
        pool = Pool(slots, self.tiers)
        pool.index()
        race = self._race = Race()
        ranks, order, total = self.cid_rank, self.order, len(self.order)

        def next_of(c: int, at: int) -> int:
            try:
                return ranks.index(c, at)
            except ValueError:
                return total

        alive = {c: i for c in self.present if (i := next_of(c, 0)) < total}
        levels = {c: self._levels(c) for c in alive}
        while alive:
            c = min(alive, key=alive.__getitem__)
            i, n = alive[c], self._class(c)[0].num_gpus
            alive[c] = next_of(c, i + 1)
            slot = pool.best_fit(levels[c], n)
            if slot is None:  # idle only shrinks: the class's later jobs wait too
                race.waits_from[c] = i
                alive[c] = total
                if i == 0 and n >= 2 and order[0] not in self.holders:
                    at = pool.most_idle(levels[c], n)  # D3.c: rank 1 reserves, and waits
                    if at is not None:
                        pool.take(at, n)
            else:
                pool.take(slot, n)
                race.onto.setdefault((slot.node, slot.tier), []).append((i, n))
            if alive[c] >= total:
                del alive[c]
        return race

    def _levels(self, cid: int) -> list[list[str]]:
        """T1, D4: the class's tiers best first, grouped by sort_order."""
        flat = sorted(self._class(cid)[1], key=lambda t: (-self.tiers[t].sort_order, t))
        return [list(g) for _, g in groupby(flat, key=lambda t: self.tiers[t].sort_order)]

    def rank_of(self, job_id: str) -> int:
        """The 0-based rank of a reservation holder: one pass over the order for all of them."""
        if self._ranks is None:
            ids = self.holders
            self._ranks = {j: k for k, j in enumerate(self.order) if j in ids}
        return self._ranks[job_id]

    def _first_waiting(self, cid: int, done: set[int], limit: int) -> int:
        """Rank of the first job of class `cid` not dispatched, or `limit` if none before it."""
        ranks = self.cid_rank
        at = self._first.get(cid)
        if at is None:
            try:
                at = self._first[cid] = ranks.index(cid, 0, limit)
            except ValueError:
                return limit  # not cached: a later holder may have a higher limit
        while at in done:
            try:
                at = ranks.index(cid, at + 1, limit)
            except ValueError:
                return limit
        return at

    def _class(self, cid: int) -> tuple[Req, list[str]]:
        got = self._flat.get(cid)
        if got is None:
            req = self.classes.request_of(cid)
            flat = [t.name for t in self.tiers.values() if tier_admits(req, t)]
            got = self._flat[cid] = (req, flat)
        return got


class Race:
    """`DemotionCheck.race`: per placement the (rank, num_gpus) that start there, and per class
    the first rank its higher jobs leave waiting."""

    __slots__ = ("onto", "waits_from")

    def __init__(self) -> None:
        self.onto: dict[tuple[str, str], list[tuple[int, int]]] = {}
        self.waits_from: dict[int, int] = {}


def _copy(s: Slot) -> Slot:
    """A scratch slot: its own idle list, the rest shared (read only in the race)."""
    c = Slot(s.node, s.tier)
    c.capacity, c.idle, c.backfill, c.reserved = s.capacity, list(s.idle), s.backfill, s.reserved
    return c
