"""The queue as the cycle reads it: once, sequentially, in entry order (SPEC D1).

Per job only the id and a class id are extracted (plain requests: num_gpus); the few jobs with a
tiers filter, a min_vram_gb or a reservation are looked at individually. The rank order is a
permutation of positions, so nothing touches the 100k job records in random order.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, chain, count, groupby, islice
from operator import attrgetter, ne

from jpu.policy.classes import ClassTable
from jpu.policy.labqueues import LabQueue, LabQueues, entry_key
from jpu.policy.model import LabUsage, QueuedJob
from jpu.policy.ordering import in_entry_order, lab_usage_at, rank_permutation

_KEY = attrgetter("num_gpus", "tiers", "min_vram_gb")
_IDS, _CIDS = attrgetter("ids"), attrgetter("cids")


class CycleView:
    """The global queue as the cycle reads it (LabView: the same, one queue per lab)."""

    def __init__(
        self,
        queue: Iterable[QueuedJob],
        classes: ClassTable,
        usage: Mapping[str, LabUsage] | None = None,
        now: float = 0.0,
        half_life_s: float = 1.0,
    ) -> None:
        """With `usage`: D1 rank order; without: entry order (the FIFO baseline)."""
        self.classes = classes
        seq = self.seq = in_entry_order(queue if isinstance(queue, Sequence) else list(queue))
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
        self.present = set(cid)  # the request classes in the queue

    def __len__(self) -> int:
        return len(self.seq)

    def job(self, rank: int) -> QueuedJob:
        """The job at `rank` (0-based)."""
        return self.seq[self.perm[rank]]


class LabView:
    """The same view of a queue kept grouped by lab (`LabQueues`): the labs are merged by
    decayed usage, each lab's jobs already being in entry order — no per-job sort (SPEC D1).
    Labs of exactly equal usage are merged by (queue_entered_at, job_id)."""

    def __init__(
        self,
        queues: LabQueues,
        classes: ClassTable,
        usage: Mapping[str, LabUsage],
        now: float,
        half_life_s: float,
    ) -> None:
        self.classes = classes
        at = lab_usage_at(queues.labs, usage, now, half_life_s)
        labs = sorted(queues.labs, key=at.__getitem__)
        usages = list(map(at.__getitem__, labs))
        # one chunk per lab, or per run of labs tied on usage (merged by entry)
        self._chunks: list[LabQueue]
        if all(map(ne, usages, islice(usages, 1, None))):  # the usual case: no ties
            self._chunks = list(map(queues.labs.__getitem__, labs))
            chunk_of = dict(zip(labs, count()))
        else:
            self._chunks, chunk_of = [], {}
            for _, tied in groupby(labs, key=at.__getitem__):
                group = list(tied)
                chunk_of.update(dict.fromkeys(group, len(self._chunks)))
                self._chunks.append(
                    queues.labs[group[0]] if len(group) == 1 else _merged(queues, group)
                )
        # first rank of each chunk
        self._starts: list[int] = list(accumulate(map(len, self._chunks), initial=0))[:-1]
        self.order: list[str] = list(chain.from_iterable(map(_IDS, self._chunks)))
        self.cid_rank: list[int] = list(chain.from_iterable(map(_CIDS, self._chunks)))
        # the request classes in the queue, as the queue counts them (no pass over its jobs)
        self.present: set[int] = set(queues.class_count)

        def rank(j: QueuedJob) -> int:
            k = chunk_of[j.lab]
            return self._starts[k] + self._chunks[k].index(entry_key(j))

        self.holders = sorted(queues.holders.values(), key=rank)

    def __len__(self) -> int:
        return len(self.order)

    def job(self, rank: int) -> QueuedJob:
        k = bisect_right(self._starts, rank) - 1
        return self._chunks[k].jobs[rank - self._starts[k]]


def _merged(queues: LabQueues, labs: list[str]) -> LabQueue:
    """Labs of equal usage as one chunk in (queue_entered_at, job_id) order (entry keys are
    unique, so the tuples compare on them alone)."""
    out = LabQueue()
    rows = sorted(
        chain.from_iterable(
            zip(lq.keys, lq.ids, lq.cids, lq.jobs, strict=True)
            for lq in map(queues.labs.__getitem__, labs)
        )
    )
    for key, jid, cid, job in rows:
        out.keys.append(key)
        out.ids.append(jid)
        out.cids.append(cid)
        out.jobs.append(job)
    return out


AnyView = CycleView | LabView
