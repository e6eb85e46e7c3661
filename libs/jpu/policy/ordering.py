"""The global queue order (SPEC D1): (lab decayed usage at `now` ASC, queue_entered_at ASC, id ASC).

Usage is decayed once per lab, not once per job. The queue is first put in (queue_entered_at,
job_id) order — free when it already is (the dispatcher and the simulator keep it so: promotion
order), checked at C speed — then job *positions* are grouped by lab in one sequential pass and
the lab groups are concatenated by usage. Labs with exactly the same usage (e.g. several at 0,
F6) are interleaved by position, i.e. by (queue_entered_at, job_id): D1 has no lab term.
The result is a permutation, so per-job data is read once, sequentially, in queue order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, count, groupby, islice
from operator import attrgetter, lt

from jpu.policy.fairshare import ZERO_USAGE, decayed
from jpu.policy.model import LabUsage, QueuedJob

BY_ENTRY = attrgetter("queue_entered_at", "job_id")


def lab_usage_at(
    labs: Iterable[str], usage: Mapping[str, LabUsage], now: float, half_life_s: float
) -> dict[str, float]:
    """Decayed usage of each lab at `now` (SPEC F3, F6)."""
    return {lab: decayed(usage.get(lab, ZERO_USAGE), now, half_life_s) for lab in labs}


def in_entry_order(queue: Sequence[QueuedJob]) -> Sequence[QueuedJob]:
    """The queue in (queue_entered_at, job_id) order; O(n) C-level check when it already is."""
    entered = [j.queue_entered_at for j in queue]
    if all(map(lt, entered, islice(entered, 1, None))):
        return queue
    return sorted(queue, key=BY_ENTRY)


def rank_permutation(
    labs: Sequence[str],
    ids: Sequence[str],
    usage: Mapping[str, LabUsage],
    now: float,
    half_life_s: float,
) -> tuple[list[int], list[str]]:
    """SPEC D1 for a queue already in entry order, given its labs and ids in that order:
    (positions by rank, job ids by rank). One sequential pass; the groups are concatenated."""
    pos: dict[str, list[int]] = {}
    idg: dict[str, list[str]] = {}
    for lab, jid, i in zip(labs, ids, count(), strict=False):
        g = idg.get(lab)
        if g is None:
            idg[lab] = [jid]
            pos[lab] = [i]
        else:
            g.append(jid)
            pos[lab].append(i)
    at = lab_usage_at(pos, usage, now, half_life_s)
    perm: list[int] = []
    order: list[str] = []
    for _, tied in groupby(sorted(pos, key=at.__getitem__), key=at.__getitem__):
        group = list(tied)
        if len(group) == 1:
            perm.extend(pos[group[0]])
            order.extend(idg[group[0]])
        else:  # equal usage: interleave by position = (queue_entered_at, job_id)
            merged = sorted(chain.from_iterable(pos[lab] for lab in group))
            perm.extend(merged)
            order.extend([ids[i] for i in merged])
    return perm, order
