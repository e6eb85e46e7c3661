"""Request classes: jobs that ask for the same thing (num_gpus, tiers filter, min_vram_gb).

Everything the cycle asks about a waiting job — which tiers admit it (D2), in which order (T1),
whether anything is available for it now, its pending reason (D7) — depends only on its class.
A cycle therefore answers per class (a handful) instead of per job (up to 100k).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from itertools import groupby

from jpu.config import Tier
from jpu.policy.model import PendingReason
from jpu.policy.placements import tier_admits

Key = tuple[int, Collection[str] | None, int | None]


class Req:
    """A class's request, as fit (D2) reads it."""

    __slots__ = ("min_vram_gb", "num_gpus", "tiers")

    def __init__(self, key: Key) -> None:
        self.num_gpus, self.tiers, self.min_vram_gb = key


class RequestClass:
    __slots__ = ("flat", "levels", "n", "reason")

    def __init__(self, key: Key, tiers: Mapping[str, Tier], baseline: Mapping[str, int]) -> None:
        req = Req(key)
        self.n = key[0]
        # T1: tiers best first; tiers of equal sort_order compete on fewest idle (D4)
        self.levels, self.flat = _tiers_of(key, tiers)
        # D7: Priority if some fit placement has enough GPUs idle or reserved by the (higher)
        # rank-1 job at the start of the walk; otherwise nothing could serve it: Resources —
        # unless a tier its VRAM floor alone excludes has enough (an OOM retry, X8, beside idle
        # smaller GPUs): then it waits for VRAM, and says so (MinVram).
        enough = any(baseline.get(t, 0) >= self.n for t in self.flat)
        self.reason: PendingReason = "Priority" if enough else "Resources"
        if not enough and req.min_vram_gb is not None:
            floor = Req((req.num_gpus, req.tiers, None))
            if any(
                baseline.get(t.name, 0) >= self.n
                for t in tiers.values()
                if tier_admits(floor, t) and t.vram_gb < req.min_vram_gb
            ):
                self.reason = "MinVram"


def _tiers_of(key: Key, tiers: Mapping[str, Tier]) -> tuple[list[list[str]], list[str]]:
    """The tiers admitting the request (D2), best first (T1): by levels of equal sort_order, and
    flat. Read-only lists, shared by every cycle that asks for the same request and tiers."""
    try:
        return _tiers_cached(key, tuple(tiers.values()))
    except TypeError:  # an unhashable tiers filter: not cached
        return _admitting(key, tiers.values())


@lru_cache(maxsize=1024)
def _tiers_cached(key: Key, tiers: tuple[Tier, ...]) -> tuple[list[list[str]], list[str]]:
    return _admitting(key, tiers)


def _admitting(key: Key, tiers: Iterable[Tier]) -> tuple[list[list[str]], list[str]]:
    req = Req(key)
    ok = sorted((t for t in tiers if tier_admits(req, t)), key=_best_first)
    return [[t.name for t in lvl] for _, lvl in groupby(ok, key=_sort_order)], [t.name for t in ok]


def _best_first(t: Tier) -> tuple[int, str]:
    return (-t.sort_order, t.name)


def _sort_order(t: Tier) -> int:
    return t.sort_order


class ClassTable(dict[int, RequestClass]):
    """Class id -> class, built on first use. Plain requests (no tiers filter, no min_vram) use
    num_gpus as id; the others get negative ids from `id_of`. `baseline` (per tier, the most
    GPUs any placement has idle or reserved by rank 1 at the start of the walk) must be set
    before the first class is built. `keys` seeds the table with ids interned elsewhere
    (`LabQueues.class_keys`)."""

    def __init__(self, tiers: Mapping[str, Tier], keys: Mapping[int, Key] | None = None) -> None:
        super().__init__()
        self.tiers = tiers
        self.baseline: Mapping[str, int] = {}
        self._keys: dict[int, Key] = dict(keys or {})
        self._ids: dict[Key, int] = {k: c for c, k in self._keys.items()}

    def __missing__(self, cid: int) -> RequestClass:
        key = self._keys.get(cid, (cid, None, None))
        k = self[cid] = RequestClass(key, self.tiers, self.baseline)
        return k

    def request_of(self, cid: int) -> Req:
        """The request a class id stands for (without building the class: no baseline needed)."""
        return Req(self._keys.get(cid, (cid, None, None)))

    def id_of(self, key: Key) -> int:
        try:
            cid = self._ids.get(key)  # fast path: tiers is already a frozenset (QueuedJob)
        except TypeError:  # an unhashable tiers collection
            cid = None
        if cid is not None:
            return cid
        n, tiers, vram = key
        if tiers is None and vram is None and n >= 1:
            return n
        hkey: Key = (n, frozenset(tiers) if tiers is not None else None, vram)
        cid = self._ids.get(hkey)
        if cid is None:
            cid = self._ids[hkey] = -1 - len(self._ids)
            self._keys[cid] = hkey
        return cid
