"""Recent run times, folded from the log (SPEC U4's input; bounded, in the snapshot).

The estimate (jpu.explain.estimate) predicts how long a job runs from the same user's (else
lab's) last `KEEP` completed runs with the same `num_gpus`, and how tight users write their
limits from the ratio run time / limit. That history is part of the shared fold, so a service
restarted from a snapshot predicts as well as one that replayed the whole log. Bounded by users ×
GPU counts (and labs × GPU counts), never by the number of jobs.
"""

from __future__ import annotations

from typing import Final

import msgspec

from jpu.domain.states import JobView
from jpu.events import JobEnded

KEEP: Final = 20


class RecentRuns(msgspec.Struct, kw_only=True):
    # who ("user" or "lab" name) -> num_gpus -> run seconds, oldest first (≤ KEEP)
    by_user: dict[str, dict[int, list[float]]] = msgspec.field(default_factory=dict)
    by_lab: dict[str, dict[int, list[float]]] = msgspec.field(default_factory=dict)
    # who -> run time / time limit of runs that had a limit, any num_gpus (≤ KEEP)
    ratio_user: dict[str, list[float]] = msgspec.field(default_factory=dict)
    ratio_lab: dict[str, list[float]] = msgspec.field(default_factory=dict)

    def record(
        self, user: str, lab: str, num_gpus: int, run_s: float, limit_s: float | None = None
    ) -> None:
        for table, who in ((self.by_user, user), (self.by_lab, lab)):
            _push(table.setdefault(who, {}).setdefault(num_gpus, []), run_s)
        if limit_s:
            for ratios, who in ((self.ratio_user, user), (self.ratio_lab, lab)):
                _push(ratios.setdefault(who, []), min(1.0, run_s / limit_s))

    def runs(self, user: str, lab: str, num_gpus: int) -> list[float]:
        """The user's runs with this GPU count, else the lab's (empty: none yet)."""
        return self.by_user.get(user, {}).get(num_gpus) or self.by_lab.get(lab, {}).get(
            num_gpus, []
        )

    def ratios(self, user: str, lab: str) -> list[float]:
        return self.ratio_user.get(user) or self.ratio_lab.get(lab, [])


def observe(runs: RecentRuns, job: JobView | None, event: JobEnded) -> None:
    """A completed attempt's run time per GPU, from its `JobEnded` (the job as folded)."""
    if job is None or event.state != "COMPLETED" or not event.gpus or event.gpu_seconds_run <= 0:
        return
    runs.record(
        job.user, job.lab, job.num_gpus, event.gpu_seconds_run / len(event.gpus), job.time_limit_s
    )


def _push(values: list[float], value: float) -> None:
    values.append(value)
    if len(values) > KEEP:
        del values[0]
