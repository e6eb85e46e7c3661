"""The queue as the cycle reads it: once, sequentially, in entry order (SPEC D1).

Per job only the id and a class id are extracted (plain requests: num_gpus); the few jobs with a
tiers filter, a min_vram_gb or a reservation are looked at individually. The rank order is a
permutation of positions, so nothing touches the 100k job records in random order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter

from jpu.policy.classes import ClassTable
from jpu.policy.model import LabUsage, QueuedJob
from jpu.policy.ordering import in_entry_order, rank_permutation

_KEY = attrgetter("num_gpus", "tiers", "min_vram_gb")


class QueueView:
    def __init__(
        self,
        queue: Sequence[QueuedJob],
        classes: ClassTable,
        usage: Mapping[str, LabUsage] | None = None,
        now: float = 0.0,
        half_life_s: float = 1.0,
    ) -> None:
        """With `usage`: D1 rank order; without: entry order (the FIFO baseline)."""
        self.classes = classes
        seq = self.seq = in_entry_order(queue)
        self.ids = [j.job_id for j in seq]
        cid = [
            j.num_gpus if j.tiers is None and j.min_vram_gb is None and j.reservation is None else 0
            for j in seq
        ]
        held: list[int] = []
        if cid and min(cid) < 1:  # the few others: C-level lookups of their request key
            pos = [i for i, c in enumerate(cid) if c < 1]
            odd = [seq[i] for i in pos]
            for i, c in zip(pos, map(classes.id_of, map(_KEY, odd)), strict=True):
                cid[i] = c
            held = [i for i, j in zip(pos, odd, strict=True) if j.reservation is not None]
        self.cid = cid
        if usage is None:
            self.perm = list(range(len(seq)))
            self.order, self.cid_rank = self.ids, cid
        else:
            labs = [j.lab for j in seq]
            self.perm, self.order = rank_permutation(labs, self.ids, usage, now, half_life_s)
            self.cid_rank = [cid[i] for i in self.perm]
        # reservation holders by rank (there are few: phase 3 keeps at most one per cycle)
        self.holders = [seq[i] for i in sorted(held, key=self.perm.index)]

    def __len__(self) -> int:
        return len(self.seq)

    def job(self, rank: int) -> QueuedJob:
        """The job at `rank` (0-based)."""
        return self.seq[self.perm[rank]]
