"""The crash-safety checker (jpu.testing.crash, SPEC O5) finds what it must: a checker that never
fails proves nothing. Each case breaks one invariant of a small, correct log (SPEC E2, E3, F4,
F5, O5, R2, S2) and must be reported; the correct log must pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from jpu.bus import Delivered
from jpu.config import load_config
from jpu.events import (
    Event,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobStarted,
    JobSubmitted,
    ReservationReleased,
    ReservationStarted,
    UsageCharged,
)
from jpu.testing.crash import check_log, compare_api

CONFIG = load_config(env={})
TFLOPS = 82.6  # rtx4090
T0 = 1_000_000.0


def job_events(job: str, lab: str, gpu: int, t: float, run_s: float = 2.0) -> list[Event]:
    ended = JobEnded(
        event_id=f"end-{job}", ts=t + run_s + 0.1, job_id=job, attempt=1, state="COMPLETED",
        exit_code=0, node="gpu-4090x2-01", tier="rtx4090", gpus=[gpu], gpu_seconds_run=run_s,
        gpu_seconds_startup=0.05, tflops=TFLOPS, usage=(run_s + 0.05) * TFLOPS,
    )  # fmt: skip
    return [
        JobSubmitted(
            event_id=f"sub-{job}",
            ts=t,
            job_id=job,
            lab=lab,
            user=f"{lab}-u",
            name="x",
            command="true",
            num_gpus=1,
        ),
        JobPromoted(event_id=f"pro-{job}", ts=t, job_id=job, queue_entered_at=t),
        JobDispatched(
            event_id=f"dis-{job}",
            ts=t + 0.01,
            job_id=job,
            attempt=1,
            node="gpu-4090x2-01",
            tier="rtx4090",
            gpus=[gpu],
        ),
        JobStarted(event_id=f"sta-{job}", ts=t + 0.06, job_id=job, attempt=1, backend_job_id="b"),
        ended,
    ]


def charge(ended: JobEnded, lab: str, value_before: float = 0.0) -> UsageCharged:
    return UsageCharged(
        event_id=f"chg-{ended.event_id}", ts=ended.ts, lab=lab, amount=ended.usage,
        value_after=value_before + ended.usage, as_of=ended.ts, job_id=ended.job_id, attempt=1,
    )  # fmt: skip


def delivered(events: list[Event]) -> list[Delivered]:
    return [Delivered(i + 1, "s", e, {}) for i, e in enumerate(events)]  # type: ignore[arg-type]


def good_log() -> list[Event]:
    a = job_events("a", "BCG", 0, T0)
    b = job_events("b", "KDG", 1, T0 + 1)
    ea, eb = a[-1], b[-1]
    assert isinstance(ea, JobEnded) and isinstance(eb, JobEnded)
    return [*a[:-1], *b[:-1], ea, charge(ea, "BCG"), eb, charge(eb, "KDG")]


def api_rows(log: list[Event]) -> tuple[dict[str, Any], dict[str, Any]]:
    check = check_log(delivered(log), CONFIG)
    jobs = {
        j: {
            "state": v.state,
            "attempt": v.attempt,
            "terminal": True,
            "placement": {"node": "gpu-4090x2-01", "gpus": list(v.last_end.gpus)}
            if v.last_end
            else None,
            "started_at": v.started_at,
            "isolation": v.isolation,
            "exit_code": 0,
            "usage_charged": check.charged_by_job.get(j, 0.0),
        }
        for j, v in check.state.jobs.items()
    }
    labs = {lab: {"raw_value": u.value, "as_of": u.as_of} for lab, u in check.state.usage.items()}
    return jobs, labs


def test_a_correct_log_and_api_pass() -> None:
    log = good_log()
    check = check_log(delivered(log), CONFIG)
    assert check.violations == []
    jobs, labs = api_rows(log)
    assert compare_api(check, jobs, labs, {"a", "b"}) == []
    assert check.stats["charges"] == 2


def _replace(log: list[Event], i: int, **changes: Any) -> list[Event]:
    out = list(log)
    out[i] = msgspec.structs.replace(out[i], **changes)
    return out


BREAKS: dict[str, tuple[Callable[[list[Event]], list[Event]], str]] = {
    # O5/E2: a second dispatch of the same attempt (what a restarted dispatcher must never do)
    "double dispatch": (
        lambda log: [*log[:3], _replace(log, 2, event_id="dis-a2")[2], *log[3:]],
        "attempt 1 dispatched twice",
    ),
    # R2: job b dispatched onto the GPU job a still holds
    "GPU held twice": (lambda log: _replace(log, 6, gpus=[0]), "while job:a holds it"),
    # F5: a charge that never landed (accounting killed between JobEnded and UsageCharged)
    "missing charge": (lambda log: log[:-1], "landed 0 times"),
    # F5: a charge that landed twice (a retried append outside the dedup window)
    "double charge": (
        lambda log: [*log, msgspec.structs.replace(log[-1], ts=log[-1].ts + 1)],
        "landed 2 times",
    ),
    # F5: charged, but not what the attempt owed
    "wrong amount": (
        lambda log: _replace(log, len(log) - 1, amount=1.0, value_after=1.0),
        "owed",
    ),
    # F3: a usage chain that does not follow from the previous value
    "broken chain": (lambda log: _replace(log, len(log) - 1, value_after=1e9), "F3"),
    # S2/O5: a job that never ended
    "never ended": (
        lambda log: [e for e in log if not (isinstance(e, JobEnded) and e.job_id == "b")][:-1],
        "not in exactly one terminal state",
    ),
    # S2: an event after the end
    "event after end": (
        lambda log: [
            *log,
            JobStarted(event_id="late", ts=T0 + 9, job_id="a", attempt=1, backend_job_id="b"),
        ],
        "after it ended",
    ),
    # F5: more held time charged than passed between dispatch and end
    "held too long": (lambda log: _replace(log, 8, gpu_seconds_run=50.0), "F5"),
    # R2: a reservation on a GPU another job runs on
    "reserved while running": (
        lambda log: [
            *log[:3],
            ReservationStarted(
                event_id="rs",
                ts=T0 + 0.5,
                job_id="b",
                node="gpu-4090x2-01",
                tier="rtx4090",
                gpus=[0],
            ),
            ReservationReleased(
                event_id="rr",
                ts=T0 + 0.6,
                job_id="b",
                node="gpu-4090x2-01",
                tier="rtx4090",
                gpus=[0],
                reason="swap",
                gpu_seconds=0.1,
                charged_now=False,
                tflops=TFLOPS,
            ),
            *log[3:],
        ],
        "while job:a holds it",
    ),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_each_broken_invariant_is_reported(name: str) -> None:
    breaking, expected = BREAKS[name]
    check = check_log(delivered(breaking(good_log())), CONFIG)
    assert any(expected in v for v in check.violations), check.violations


def test_api_that_differs_from_the_log_is_reported() -> None:
    log = good_log()
    check = check_log(delivered(log), CONFIG)
    jobs, labs = api_rows(log)
    assert any("404" in v for v in compare_api(check, {**jobs, "a": None}, labs, {"a", "b"}))
    wrong_state = {**jobs, "b": {**jobs["b"], "state": "RUNNING", "terminal": False}}
    assert any("API says RUNNING" in v for v in compare_api(check, wrong_state, labs, {"a", "b"}))
    no_start = {**jobs, "b": {**jobs["b"], "started_at": None}}
    assert any("started_at" in v for v in compare_api(check, no_start, labs, {"a", "b"}))
    wrong_charge = {**jobs, "a": {**jobs["a"], "usage_charged": 0.0}}
    assert any("usage_charged" in v for v in compare_api(check, wrong_charge, labs, {"a", "b"}))
    stale_lab = {**labs, "BCG": {"raw_value": 0.0, "as_of": 0.0}}
    assert any("lab BCG" in v for v in compare_api(check, jobs, stale_lab, {"a", "b"}))
    assert any("not in the log" in v for v in compare_api(check, jobs, labs, {"a", "b", "c"}))
    assert any("no client was told" in v for v in compare_api(check, jobs, labs, {"a"}))


def lost_dispatch_log() -> list[Event]:
    """Seed 154951 (issue 27, three stream-leader kills): job c's cancel and its dispatch were
    both appended on one expected seq during a leader change, the cancel first. The fold (and so
    the agent and the API) leaves c CANCELLING with no placement, and it ends CANCELLED on no
    GPU."""
    c = "4ebd"
    return [
        *good_log(),
        JobSubmitted(
            event_id="sub-c",
            ts=T0 + 10,
            job_id=c,
            lab="BCG",
            user="BCG-u",
            name="x",
            command="true",
            num_gpus=1,
        ),
        JobPromoted(event_id="pro-c", ts=T0 + 10, job_id=c, queue_entered_at=T0 + 10),
        JobCancelRequested(event_id="can-c", ts=T0 + 11, job_id=c, by="BCG-u"),
        JobDispatched(
            event_id="dis-c",
            ts=T0 + 11,
            job_id=c,
            attempt=1,
            node="gpu-4090x2-01",
            tier="rtx4090",
            gpus=[1],
        ),
        JobEnded(event_id="end-c", ts=T0 + 11.1, job_id=c, attempt=1, state="CANCELLED"),
    ]


def test_O5_a_dispatch_the_fold_did_not_apply_is_no_placement() -> None:
    """Issue 27 (seed 154951 of test_cluster_faults): the checker counted a dispatch
    that lost the race to a cancel, and reported "ended on None[], dispatched
    gpu-4090x2-01[1]" and "API placement {}, the log gpu-4090x2-01[1]"; the fold, the agent and
    the API were right. Only the dispatches the fold applied are placements."""
    log = lost_dispatch_log()
    check = check_log(delivered(log), CONFIG)
    assert check.violations == []
    assert check.stats["dispatch_not_applied"] == 1
    assert check.state.jobs["4ebd"].state == "CANCELLED"
    jobs, labs = api_rows(log)
    jobs["4ebd"] = {**jobs["4ebd"], "placement": None, "exit_code": None}
    assert compare_api(check, jobs, labs, {"a", "b", "4ebd"}) == []


def test_O5_a_second_dispatch_of_a_placed_attempt_is_still_reported() -> None:
    """What the fold ignores is no licence: placing an attempt already placed is O5's breach,
    and a dispatch the fold did not apply holds no GPU another job may not take."""
    log = lost_dispatch_log()
    again = JobDispatched(
        event_id="dis-a-again", ts=T0 + 0.02, job_id="a", attempt=1, node="gpu-4090x2-01",
        tier="rtx4090", gpus=[1],
    )  # fmt: skip
    check = check_log(delivered([*log[:3], again, *log[3:]]), CONFIG)
    assert any("attempt 1 dispatched twice" in v for v in check.violations), check.violations
    assert not any("holds it" in v for v in check.violations), check.violations
