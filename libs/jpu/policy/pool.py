"""The cycle's working view of the GPU pool: idle GPUs per placement, indexed for best fit.

Per active tier, placements with idle GPUs are kept in buckets by idle count (node names sorted),
so "the fit placement with the fewest idle GPUs that still fits" (SPEC D4) and "can any placement
of this tier serve n GPUs" are answered without scanning all placements.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator, Mapping, Sequence

from jpu.config import Tier
from jpu.policy.placements import Slot

Levels = Sequence[Sequence[str]]  # tier names grouped by sort_order, best level first (T1)


class Pool:
    def __init__(self, slots: dict[tuple[str, str], Slot], tiers: Mapping[str, Tier]) -> None:
        self.slots = slots
        self.tiers = tiers
        self.buckets: dict[str, dict[int, list[str]]] = {}
        self.max_idle: dict[str, int] = {}

    def index(self) -> None:
        """Build the buckets; call once the idle lists are final for the start of the walk."""
        self.buckets = {name: {} for name, t in self.tiers.items() if t.active}  # T2
        for s in self.slots.values():
            b = self.buckets.get(s.tier)
            if b is not None and s.idle:
                b.setdefault(len(s.idle), []).append(s.node)
        for b in self.buckets.values():
            for nodes in b.values():
                nodes.sort()
        self.max_idle = {t: max(b, default=0) for t, b in self.buckets.items()}

    def _move(self, slot: Slot, old: int, new: int) -> None:
        b = self.buckets.get(slot.tier)
        if b is None or old == new:
            return
        if old:
            nodes = b[old]
            del nodes[bisect_left(nodes, slot.node)]
            if not nodes:
                del b[old]
        if new:
            insort(b.setdefault(new, []), slot.node)
        self.max_idle[slot.tier] = max(b, default=0)

    def take(self, slot: Slot, k: int) -> tuple[int, ...]:
        """Take k idle GPUs, free ones before backfilled ones (fewer preemptions, B4)."""
        old = len(slot.idle)
        bf = slot.backfill
        chosen = sorted(slot.idle, key=lambda i: (i in bf, i))[:k]
        slot.idle = [i for i in slot.idle if i not in chosen]
        self._move(slot, old, len(slot.idle))
        return tuple(chosen)

    def give(self, slot: Slot, gpus: Sequence[int]) -> None:
        old = len(slot.idle)
        slot.idle.extend(gpus)
        self._move(slot, old, len(slot.idle))

    def slot(self, node: str, tier: str) -> Slot | None:
        return self.slots.get((node, tier))

    def can_serve(self, flat: Sequence[str], n: int) -> bool:
        mi = self.max_idle
        return any(mi.get(t, 0) >= n for t in flat)

    def best_fit(self, levels: Levels, n: int) -> Slot | None:
        """SPEC D4: sort_order DESC, then fewest idle GPUs that still fit, then node name."""
        for level in levels:
            best: tuple[int, str, str] | None = None
            for tier in level:
                top = self.max_idle.get(tier, 0)
                if top < n:
                    continue
                b = self.buckets[tier]
                for k in range(n, top + 1):
                    nodes = b.get(k)
                    if nodes:
                        cand = (k, nodes[0], tier)
                        if best is None or cand < best:
                            best = cand
                        break
            if best is not None:
                return self.slots[(best[1], best[2])]
        return None

    def candidates(self, levels: Levels, n: int) -> Iterator[Slot]:
        """Every placement with ≥ n idle GPUs, in D4 order (for backfill-style baselines)."""
        for level in levels:
            found: list[tuple[int, str, str]] = []
            for tier in level:
                b = self.buckets.get(tier, {})
                found.extend((k, node, tier) for k in b if k >= n for node in b[k])
            for _, node, tier in sorted(found):
                yield self.slots[(node, tier)]

    def most_idle(
        self, levels: Levels, n: int, parked: Mapping[tuple[str, str], int] | None = None
    ) -> Slot | None:
        """SPEC D4 for a new reservation: sort_order DESC, idle DESC, node name; capacity ≥ n.
        `parked` (R6): GPUs other jobs keep reserved per placement; they do not count as
        capacity, so a new reservation never waits on GPUs a parked one holds."""
        parked = parked or {}
        for level in levels:
            best: tuple[int, str, str] | None = None
            for tier in level:
                b = self.buckets.get(tier, {})
                for k in sorted(b, reverse=True):
                    node = next(
                        (
                            x
                            for x in b[k]
                            if self.slots[(x, tier)].capacity - parked.get((x, tier), 0) >= n
                        ),
                        None,
                    )
                    if node is not None:
                        cand = (-k, node, tier)
                        if best is None or cand < best:
                            best = cand
                        break
            if best is not None:
                return self.slots[(best[1], best[2])]
        return None
