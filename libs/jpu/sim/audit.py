"""Replay check (SPEC F5, §10 last line): fold a run's event log through the charging code and
compare with its summary.

Two independent derivations must agree with the summary's lab usage:
  1. the `UsageCharged` events folded through `fairshare.charge` (what accounting projects), each
     `value_after` checked on the way;
  2. the charges re-derived from the facts: `JobEnded.usage`, R3-like `ReservationReleased`
     (`gpu_seconds × tflops`) and initial usage, each matched to exactly one `UsageCharged`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import msgspec

from jpu.events import AnyEvent, JobEnded, ReservationReleased, UsageCharged, decode
from jpu.policy import fairshare
from jpu.policy.model import LabUsage

REL_TOL = 1e-6  # F5: floating-point noise only


class AuditReport(msgspec.Struct, kw_only=True):
    labs: dict[str, dict[str, float]]  # lab -> replayed, summary, rel_diff
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= REL_TOL * max(1.0, abs(a), abs(b))


def _expected_charges(events: list[AnyEvent]) -> dict[tuple[str | None, str], list[float]]:
    """(job id, reason) -> amounts the facts call for, in order."""
    want: dict[tuple[str | None, str], list[float]] = defaultdict(list)
    for e in events:
        if isinstance(e, JobEnded) and e.usage > 0:
            want[(e.job_id, "job_end")].append(e.usage)
        elif isinstance(e, ReservationReleased) and e.charged_now:
            want[(e.job_id, e.reason)].append(fairshare.cost(1, e.gpu_seconds, e.tflops))
    return want


def replay(events: list[AnyEvent], half_life_s: float) -> tuple[dict[str, LabUsage], list[str]]:
    """Fold UsageCharged through fairshare.charge; report every disagreement with the facts."""
    usage: dict[str, LabUsage] = {}
    problems: list[str] = []
    want = _expected_charges(events)
    for e in events:
        if not isinstance(e, UsageCharged):
            continue
        after = fairshare.charge(usage.get(e.lab, LabUsage()), e.amount, e.ts, half_life_s)
        usage[e.lab] = after
        if not _close(after.value, e.value_after):
            problems.append(f"{e.event_id}: value_after {e.value_after} != replayed {after.value}")
        if e.reason == "initial":
            continue
        expected = want.get((e.job_id, e.reason))
        if not expected:
            problems.append(f"{e.event_id}: charge {e.amount} for {e.job_id} has no fact")
        elif not _close(expected.pop(0), e.amount):
            problems.append(f"{e.event_id}: charge {e.amount} differs from its fact")
    for (job, reason), left in want.items():
        if left:
            problems.append(f"{job}: {len(left)} {reason} charge(s) never made")
    return usage, problems


def audit(events: list[AnyEvent], summary: dict[str, Any]) -> AuditReport:
    half_life = float(summary["parameters"]["half_life_s"])
    end = float(summary["end_time_s"])
    usage, problems = replay(events, half_life)
    labs: dict[str, dict[str, float]] = {}
    for lab, s in summary["labs"].items():
        replayed = fairshare.decayed(usage.get(lab, LabUsage()), end, half_life)
        want = float(s["usage_tflop_s"])
        diff = abs(replayed - want) / max(1.0, abs(want))
        labs[lab] = {"replayed": replayed, "summary": want, "rel_diff": diff}
        if diff > REL_TOL:
            problems.append(f"lab {lab}: replayed usage {replayed} != summary {want}")
    for lab in sorted(set(usage) - set(summary["labs"])):
        problems.append(f"lab {lab}: charged in the log but missing from the summary")
    return AuditReport(labs=labs, problems=problems)


def audit_dir(out_dir: str | Path) -> AuditReport:
    """Audit a `jpu simulate --out DIR` directory (events.jsonl + summary.json)."""
    d = Path(out_dir)
    with (d / "events.jsonl").open("rb") as f:
        events = [decode(line) for line in f if line.strip()]
    summary = json.loads((d / "summary.json").read_text())
    return audit(events, summary)
