"""Dependencies and holds of personal-queue jobs (SPEC Q8, Q9, D7). Pure.

A dependency is written as Slurm writes it: `afterok:ID[:ID...]`, `afternotok:`, `afterany:`,
`after:` (the parent started), joined by `,` (all must hold), and `singleton` (at most one job
of the user's with that name holds a slot, S1). `?` (any of) is not supported and refused.

What each kind makes of a parent (Q8):
  after       met once the parent started (or ended: Slurm's "started or cancelled");
  afterany    met once the parent ended for good;
  afterok     met when it ended COMPLETED, never when it ended FAILED or CANCELLED;
  afternotok  met when it ended FAILED or CANCELLED, never when it ended COMPLETED.
"Ended for good" is terminal and no OOM retry pending (X8): a retry may still complete it.

A parent may be a whole array (Q7, its id without `_<index>`), as in Slurm: `after` is met once
every task started (or ended), `afterany` once every task ended, `afterok` once every task
COMPLETED (never once one ended otherwise), `afternotok` once every task ended and one did not
complete (never when all completed). A task `ID_7` is a parent like any job.
A job whose dependency can never be met is ended CANCELLED with reason
`DEPENDENCY_NEVER_SATISFIED` (intake appends it); none waits forever.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

KINDS: Final = ("after", "afterany", "afterok", "afternotok")
SINGLETON: Final = "singleton"
NEVER_SATISFIED: Final = "DEPENDENCY_NEVER_SATISFIED"  # JobEnded.reason (Q8)
MAX_PARENTS: Final = 100  # parents of one job: a bound, so one submit cannot fan out forever
MAX_TEXT: Final = 4096

Verdict = Literal["met", "wait", "never"]
Condition = tuple[str, str]  # (kind, parent job id)


class Dependency(msgspec.Struct, frozen=True):
    conditions: tuple[Condition, ...] = ()
    singleton: bool = False

    def text(self) -> str | None:
        """The normalised form the log records (None: no dependency)."""
        by_kind: dict[str, list[str]] = {}
        for kind, parent in self.conditions:
            by_kind.setdefault(kind, []).append(parent)
        parts = [f"{k}:{':'.join(ids)}" for k, ids in by_kind.items()]
        if self.singleton:
            parts.append(SINGLETON)
        return ",".join(parts) or None


def parse(text: str) -> Dependency:
    """Slurm's `--dependency` syntax; raises ValueError saying what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("must be a string like afterok:ID[:ID...][,afterany:ID] or singleton")
    if len(text) > MAX_TEXT:
        raise ValueError(f"at most {MAX_TEXT} characters")
    if "?" in text:
        raise ValueError("'?' (any of) is refused: only ',' (all of) is supported")
    conditions: list[Condition] = []
    singleton = False
    for part in text.strip().split(","):
        part = part.strip()
        if part == SINGLETON:
            singleton = True
            continue
        kind, _, ids = part.partition(":")
        if kind not in KINDS:
            raise ValueError(f"unknown type {kind!r} (known: {', '.join(KINDS)}, {SINGLETON})")
        parents = [i.strip() for i in ids.split(":")]
        if not ids or not all(_id_ok(p) for p in parents):
            raise ValueError(f"{kind} needs job ids: {kind}:ID[:ID...]")
        conditions.extend((kind, p) for p in parents if (kind, p) not in conditions)
    if len(conditions) > MAX_PARENTS:
        raise ValueError(f"at most {MAX_PARENTS} job ids")
    # in the order of the normalised text (by kind, as first named): what a submit decides on
    # is what the log's `dependency` reads back as (`parsed`), condition for condition
    by_kind: dict[str, list[Condition]] = {}
    for c in conditions:
        by_kind.setdefault(c[0], []).append(c)
    return Dependency(tuple(c for group in by_kind.values() for c in group), singleton)


def _id_ok(job_id: str) -> bool:
    return 0 < len(job_id) <= 64 and all(c.isalnum() or c in "_-" for c in job_id)


def parsed(text: str | None) -> Dependency:
    """The dependency a logged `JobSubmitted.dependency` holds (None or unreadable: none; the
    intake only logs what `parse` accepts)."""
    if not text:
        return Dependency()
    try:
        return parse(text)
    except ValueError:
        return Dependency()


def verdict(kind: str, started: bool, final: str | None) -> Verdict:
    """Q8: one condition on a parent that `started` (ever) and ended for good as `final`
    (COMPLETED | FAILED | CANCELLED; None: not yet)."""
    if kind == "after":
        return "met" if started or final is not None else "wait"
    if final is None:
        return "wait"
    if kind == "afterany":
        return "met"
    ok = final == "COMPLETED"
    if kind == "afterok":
        return "met" if ok else "never"
    return "never" if ok else "met"  # afternotok


class ArrayProgress(msgspec.Struct):
    """Q8: what the tasks of an array did so far, counted by the fold (jpu.domain.cluster)."""

    array_id: str
    lab: str
    total: int
    started: int = 0  # tasks that started, or ended without starting (`after`)
    ended: int = 0  # tasks ended for good
    completed: int = 0  # ... of them COMPLETED

    @property
    def final(self) -> str | None:
        """The array's outcome once every task ended for good (None before): COMPLETED when all
        did, else FAILED — what a remembered parent keeps (afterok never, afternotok met)."""
        if self.ended < self.total:
            return None
        return "COMPLETED" if self.completed == self.total else "FAILED"


def array_verdict(kind: str, p: ArrayProgress) -> Verdict:
    """Q8: one condition on a whole array (Slurm's semantics, above)."""
    if kind == "after":
        return "met" if p.started >= p.total else "wait"
    if kind == "afterok" and p.ended > p.completed:
        return "never"  # a task ended FAILED or CANCELLED: the array can no longer be all ok
    final = p.final
    return "wait" if final is None else verdict(kind, True, final)


def foreign_lab(conditions: tuple[Condition, ...], lab_of: dict[str, str | None], lab: str) -> str:
    """Q8: '' when every parent is a known job of `lab`; else the refusal's message
    (`lab_of[id]` None: unknown here)."""
    for _, parent in conditions:
        owner = lab_of.get(parent)
        if owner is None:
            return f"no job {parent} (unknown, or ended too long ago to depend on)"
        if owner != lab:
            return f"job {parent} belongs to another lab; depend on your lab's jobs only"
    return ""
