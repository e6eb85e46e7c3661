"""Pending reasons (SPEC D7) as a read-only mapping computed from the cycle's rank order.

After the walk, a waiting job's reason depends only on its request class (`classes.py`), except
rank 1 holding a reservation ("Reservation"); dispatched jobs have none. So the cycle stores the
rank order, the class of each rank, one reason per class and the few dispatched ranks, instead of
inserting up to 100k entries into a dict every cycle. It reads like a dict: lookups by job id
(the id -> rank index is built on the first lookup), iteration in rank order, equality with a
plain dict. `dict(p.items())` copies it at C speed; `reason_at(rank)` needs no index.
"""

from __future__ import annotations

from collections.abc import Collection, ItemsView, Iterator, Mapping, Sequence
from itertools import compress, count, islice

from jpu.policy.model import PendingReason


class Pending(Mapping[str, PendingReason]):
    __slots__ = ("_cids", "_index", "_order", "_reasons", "_skip", "_special")

    def __init__(
        self,
        order: Sequence[str],
        cids: Sequence[int],
        reasons: Mapping[int, PendingReason],
        skip: Collection[int] = (),
        first: PendingReason | None = None,
        special: Mapping[int, PendingReason] | None = None,
    ) -> None:
        """`order`/`cids`: job ids and class ids by rank; `reasons`: class -> reason; `skip`:
        ranks without a reason (dispatched); `first`: the reason of rank 1 if not its class's;
        `special`: rank -> reason for the few others that are not their class's (R6 parked)."""
        self._order, self._cids, self._reasons = order, cids, reasons
        self._skip = frozenset(skip)
        self._special = dict(special or {})
        if first is not None:
            self._special[0] = first
        self._index: dict[str, int] | None = None

    def reason_at(self, rank: int) -> PendingReason | None:
        """The reason of the job at `rank` (0-based), None if it was dispatched."""
        if rank in self._skip:
            return None
        got = self._special.get(rank) if self._special else None
        if got is not None:
            return got
        return self._reasons[self._cids[rank]]

    def _rank(self, job_id: str) -> int | None:
        if self._index is None:
            self._index = dict(zip(self._order, count(), strict=False))
        return self._index.get(job_id)

    def __getitem__(self, job_id: str) -> PendingReason:
        rank = self._rank(job_id)
        reason = self.reason_at(rank) if rank is not None else None
        if reason is None:
            raise KeyError(job_id)
        return reason

    def __contains__(self, job_id: object) -> bool:
        rank = self._rank(job_id) if isinstance(job_id, str) else None
        return rank is not None and rank not in self._skip

    def __len__(self) -> int:
        return len(self._order) - len(self._skip)

    def _mask(self) -> Iterator[bool]:
        skip = self._skip
        return (i not in skip for i in range(len(self._order)))

    def __iter__(self) -> Iterator[str]:
        if not self._skip:
            return iter(self._order)
        return compress(self._order, self._mask())

    def _pairs(self) -> Iterator[tuple[str, PendingReason]]:
        order = self._order
        reasons: Iterator[PendingReason] = map(self._reasons.__getitem__, self._cids)
        if self._special and order:
            reasons = _replace(reasons, self._special)
        pairs = zip(order, reasons, strict=True)
        return compress(pairs, self._mask()) if self._skip else pairs

    def items(self) -> ItemsView[str, PendingReason]:
        return _Items(self)

    def __repr__(self) -> str:
        return f"Pending({dict(self._pairs())!r})"


def _replace(
    it: Iterator[PendingReason], special: Mapping[int, PendingReason]
) -> Iterator[PendingReason]:
    """The class reasons with the few `special` ranks replaced, at C speed between them."""
    at = 0
    for rank in sorted(special):
        yield from islice(it, rank - at)
        next(it, None)
        yield special[rank]
        at = rank + 1
    yield from it


class _Items(ItemsView[str, PendingReason]):
    _mapping: Pending

    def __iter__(self) -> Iterator[tuple[str, PendingReason]]:
        return self._mapping._pairs()
