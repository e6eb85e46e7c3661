"""The global queue kept grouped by lab, each lab in entry order — maintained incrementally.

SPEC D1 orders the queue by (lab decayed usage, queue_entered_at, job id). Within one lab the
usage term is constant, so a lab's jobs are always in (queue_entered_at, job id) order whatever
the usages: a caller that keeps this structure up to date as jobs enter and leave the queue
(the fold, the simulator) hands the cycle a queue it only has to merge by lab usage (≤ a few
hundred labs) instead of sorting 100k jobs every cycle.

Per lab, parallel lists hold what the cycle reads: job ids, request class ids (see
`jpu.policy.classes`: num_gpus for plain requests, negative ids interned here for the others)
and the records. Iterating a `LabQueues` yields the `QueuedJob` records (lab by lab), so it can
stand wherever a queue list is read; lookups, `in`, assignment and `del` take a job id, as on a
`dict[job_id, QueuedJob]`. It is mutable: do not change it while a cycle reads it.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

from jpu.policy.classes import Key
from jpu.policy.model import QueuedJob

EntryKey = tuple[float, str]  # (queue_entered_at, job_id)


class LabQueue:
    """One lab's queued jobs in (queue_entered_at, job_id) order, as parallel lists."""

    __slots__ = ("cids", "ids", "jobs", "keys")

    def __init__(self) -> None:
        self.keys: list[EntryKey] = []
        self.ids: list[str] = []
        self.cids: list[int] = []
        self.jobs: list[QueuedJob] = []

    def insert(self, key: EntryKey, cid: int, job: QueuedJob) -> None:
        keys = self.keys
        i = len(keys) if not keys or keys[-1] < key else bisect_left(keys, key)  # mostly appends
        keys.insert(i, key)
        self.ids.insert(i, key[1])
        self.cids.insert(i, cid)
        self.jobs.insert(i, job)

    def delete(self, key: EntryKey) -> int:
        """Remove the job at `key`; returns its class id."""
        i = bisect_left(self.keys, key)
        cid = self.cids[i]
        del self.keys[i], self.ids[i], self.cids[i], self.jobs[i]
        return cid

    def index(self, key: EntryKey) -> int:
        return bisect_left(self.keys, key)

    def __len__(self) -> int:
        return len(self.keys)


def entry_key(job: QueuedJob) -> EntryKey:
    return (job.queue_entered_at, job.job_id)


class LabQueues:
    """job id -> QueuedJob, grouped by lab (see the module docstring). O(log n) lookups,
    appends in O(1) for the usual case of a job entering the queue after the others."""

    def __init__(self, jobs: Iterable[QueuedJob] = ()) -> None:
        self.labs: dict[str, LabQueue] = {}
        self.by_id: dict[str, QueuedJob] = {}
        self.holders: dict[str, QueuedJob] = {}  # jobs holding a reservation (few, R2)
        self.class_keys: dict[int, Key] = {}  # interned class id (< 0) -> request key
        self._class_ids: dict[Key, int] = {}
        # class id -> queued jobs of that class (> 0): the classes present, without a pass
        # over the queue per cycle
        self.class_count: dict[int, int] = {}
        for j in sorted(jobs, key=entry_key):
            self.put(j)

    def class_id(self, job: QueuedJob) -> int:
        """The request class of a job: num_gpus when plain, an interned negative id otherwise."""
        if job.tiers is None and job.min_vram_gb is None and job.num_gpus >= 1:
            return job.num_gpus
        key: Key = (job.num_gpus, job.tiers, job.min_vram_gb)
        cid = self._class_ids.get(key)
        if cid is None:
            cid = self._class_ids[key] = -1 - len(self._class_ids)
            self.class_keys[cid] = key
        return cid

    def put(self, job: QueuedJob) -> None:
        """Add a job, or replace the record of a job already queued (e.g. its reservation)."""
        old = self.by_id.get(job.job_id)
        if old is not None:
            if old.lab == job.lab and old.queue_entered_at == job.queue_entered_at:
                lq = self.labs[job.lab]  # same place: replace in place
                i = lq.index(entry_key(job))
                cid = self.class_id(job)
                if cid != lq.cids[i]:
                    self._count(lq.cids[i], -1)
                    self._count(cid, 1)
                lq.cids[i], lq.jobs[i] = cid, job
                self._hold(job)
                self.by_id[job.job_id] = job
                return
            self.discard(job.job_id)
        lab = self.labs.get(job.lab)
        if lab is None:
            lab = self.labs[job.lab] = LabQueue()
        cid = self.class_id(job)
        lab.insert(entry_key(job), cid, job)
        self._count(cid, 1)
        self._hold(job)
        self.by_id[job.job_id] = job

    def _count(self, cid: int, delta: int) -> None:
        n = self.class_count.get(cid, 0) + delta
        if n:
            self.class_count[cid] = n
        else:
            del self.class_count[cid]

    def _hold(self, job: QueuedJob) -> None:
        if job.reservation is not None:
            self.holders[job.job_id] = job
        else:
            self.holders.pop(job.job_id, None)

    def discard(self, job_id: str) -> QueuedJob | None:
        """Remove a job if queued; returns its record."""
        job = self.by_id.pop(job_id, None)
        if job is None:
            return None
        lq = self.labs[job.lab]
        self._count(lq.delete(entry_key(job)), -1)
        if not lq:
            del self.labs[job.lab]
        self.holders.pop(job_id, None)
        return job

    def get(self, job_id: str) -> QueuedJob | None:
        return self.by_id.get(job_id)

    # dict-like access by job id, so it can replace a `dict[job_id, QueuedJob]` in place
    def __getitem__(self, job_id: str) -> QueuedJob:
        return self.by_id[job_id]

    def __setitem__(self, job_id: str, job: QueuedJob) -> None:
        if job_id != job.job_id:
            raise ValueError(f"key {job_id!r} is not the job's id {job.job_id!r}")
        self.put(job)

    def __delitem__(self, job_id: str) -> None:
        if self.discard(job_id) is None:
            raise KeyError(job_id)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.by_id

    def values(self) -> Iterator[QueuedJob]:
        return iter(self)

    def __len__(self) -> int:
        return len(self.by_id)

    def __iter__(self) -> Iterator[QueuedJob]:
        for lq in self.labs.values():
            yield from lq.jobs

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LabQueues):
            return NotImplemented
        return self.by_id == other.by_id

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LabQueues({len(self.by_id)} jobs, {len(self.labs)} labs)"
