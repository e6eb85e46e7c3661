"""A job's attempts from its events and the OOM retry in one sentence (SPEC X6–X8, U5), pure: on the
events as `GET /v1/jobs/{id}/events` shows them."""

from __future__ import annotations

from typing import Any

import msgspec

from jpu.domain.attempts import Attempt, attempts, explain, from_row, gpu_seconds
from jpu.events import (
    Delivered,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobSubmitted,
    subject_for,
)
from jpu_services.gateway.routes._attempts import story

VRAM = {"rtx4090": 24, "rtx3080ti": 12}


def ev(kind: str, ts: float, **kw: Any) -> dict[str, Any]:
    return {"type": kind, "ts": ts, "job_id": "j1", **kw}


SUBMITTED = ev("JobSubmitted", 0.0, min_vram_gb=None, num_gpus=1)
OOM_1 = [
    SUBMITTED,
    ev("JobPromoted", 1.0, queue_entered_at=1.0),
    ev("JobDispatched", 2.0, attempt=1, node="gpu-3080tix2-01", tier="rtx3080ti", gpus=[0]),
    ev("JobStarted", 3.0, attempt=1, backend_job_id="local-1"),
    ev("JobEnded", 13.0, attempt=1, state="FAILED", exit_code=1, reason="OOM", oom=True,
       node="gpu-3080tix2-01", tier="rtx3080ti", gpus=[0], gpu_seconds_run=11.0),
]  # fmt: skip
RETRY = ev("JobRetryScheduled", 13.5, attempt=2, min_vram_gb=13)


def test_X8_a_scheduled_retry_waiting_says_what_gpu_it_needs() -> None:
    items = attempts([*OOM_1, RETRY], oom_pending=False)
    assert [(a.attempt, a.state) for a in items] == [(1, "FAILED"), (2, "WAITING")]
    first = items[0]
    assert (first.tier, first.node, first.exit_code, first.reason) == (
        "rtx3080ti", "gpu-3080tix2-01", 1, "OOM",
    )  # fmt: skip
    assert first.retry is not None and first.retry.decision == "scheduled"
    assert explain(items, VRAM, 3) == [
        "attempt 1 ran out of GPU memory on rtx3080ti (12 GB); retrying on a GPU with more "
        "than 12 GB"
    ]


def test_X8_the_order_of_the_retry_and_the_end_does_not_matter() -> None:
    a = attempts([*OOM_1, RETRY], oom_pending=False)
    b = attempts([*OOM_1[:-1], RETRY, OOM_1[-1]], oom_pending=False)  # the retry first
    assert a == b


def test_X8_after_the_retry_ran_the_sentence_says_where() -> None:
    second = [
        ev("JobDispatched", 20.0, attempt=2, node="gpu-4090x2-01", tier="rtx4090", gpus=[1]),
        ev("JobStarted", 21.0, attempt=2, backend_job_id="local-2"),
        ev("JobEnded", 31.0, attempt=2, state="COMPLETED", exit_code=0, gpu_seconds_run=10.0,
           gpu_seconds_startup=1.0, node="gpu-4090x2-01", tier="rtx4090", gpus=[1]),
    ]  # fmt: skip
    items = attempts([*OOM_1, RETRY, *second], oom_pending=False)
    assert [a.state for a in items] == ["FAILED", "COMPLETED"]
    assert explain(items, VRAM) == [
        "attempt 1 ran out of GPU memory on rtx3080ti (12 GB); retried as attempt 2 on rtx4090 "
        "(24 GB)"
    ]
    assert gpu_seconds(items, 1, now=1000.0) == 22.0  # from each dispatch: start-up + run (F5)


def test_X8_declined_retries_say_why_the_job_failed() -> None:
    on_4090 = [
        SUBMITTED,
        ev("JobDispatched", 2.0, attempt=1, node="n", tier="rtx4090", gpus=[0]),
        ev("JobEnded", 9.0, attempt=1, state="FAILED", exit_code=1, reason="OOM", oom=True,
           tier="rtx4090", node="n", gpus=[0]),
    ]  # fmt: skip
    no_fit = ev("JobRetryDeclined", 9.5, attempt=1, reason="no_fit", needed_vram_gb=25)
    assert explain(attempts([*on_4090, no_fit], oom_pending=False), VRAM) == [
        "attempt 1 ran out of GPU memory on rtx4090 (24 GB); no GPU with more than 24 GB exists "
        "here, so the job failed"
    ]
    last = ev("JobRetryDeclined", 9.5, attempt=1, reason="max_attempts", needed_vram_gb=25)
    assert explain(attempts([*on_4090, last], oom_pending=False), VRAM, 1) == [
        "attempt 1 ran out of GPU memory on rtx4090 (24 GB); it was the last of 1 attempt "
        "allowed (max_attempts), so the job failed"
    ]
    # a tier no longer configured: its VRAM is what the decision says it lacked (X8: v + 1)
    assert explain(attempts([*on_4090, no_fit], oom_pending=False), {})[0].startswith(
        "attempt 1 ran out of GPU memory on rtx4090 (24 GB)"
    )


def test_X8_an_undecided_or_cancelled_retry_and_a_host_oom() -> None:
    assert explain(attempts(OOM_1, oom_pending=True), VRAM)[0].endswith(
        "; deciding whether to retry it on a GPU with more than 12 GB"
    )
    cancel = ev("JobCancelRequested", 14.0, by="alice")
    assert explain(attempts([*OOM_1, cancel], oom_pending=False), VRAM)[0].endswith(
        "; it was not retried: the job was cancelled"
    )
    host = [
        SUBMITTED,
        ev("JobEnded", 9.0, attempt=1, state="FAILED", exit_code=137, host_oom=True, node="n1"),
    ]
    (sentence,) = explain(attempts(host, oom_pending=False), VRAM)
    assert sentence.startswith("attempt 1 ran out of host memory (RAM) on n1; only GPU")
    ok = [SUBMITTED, ev("JobEnded", 9.0, attempt=1, state="COMPLETED", exit_code=0)]
    assert explain(attempts(ok, oom_pending=False), VRAM) == []


def test_X6_the_row_gives_the_same_single_attempt() -> None:
    row = {
        "state": "RUNNING", "attempt": 1, "tier": "rtx4090", "node": "n", "gpus": [0, 1],
        "dispatched_at": 100.0, "started_at": 101.0, "ended_at": None, "exit_code": None,
        "end_reason": None, "oom": False, "backend_job_id": "b", "num_gpus": 2,
    }  # fmt: skip
    a = from_row(row)
    assert a == Attempt(1, "RUNNING", "rtx4090", "n", [0, 1], 100.0, 101.0, backend_job_id="b")
    assert gpu_seconds([a], 2, now=160.0) == 120.0  # running: counted up to now (F5)
    ended = from_row({**row, "state": "COMPLETED", "ended_at": 130.0, "exit_code": 0})
    assert ended.gpu_seconds == 60.0 and ended.state == "COMPLETED"
    assert from_row({**row, "state": "GLOBAL_QUEUE_WAIT", "node": None}).state == "WAITING"


def test_X8_pending_or_called_off_is_the_job_folds_answer() -> None:
    """An OOM end with no recorded decision: open while the job fold (JobView.oom_pending) says
    so, called off by a cancel after the end; the page tells what the dispatcher will act on."""
    kw = {"job_id": "j1"}
    run = [
        JobSubmitted(event_id="s", ts=0.0, **kw, lab="L", user="u", name="n", command="c",
                     num_gpus=1),
        JobPromoted(event_id="p", ts=1.0, **kw, queue_entered_at=1.0),
        JobDispatched(event_id="d", ts=2.0, **kw, attempt=1, node="n1", tier="rtx3080ti",
                      gpus=[0]),
    ]  # fmt: skip
    end = JobEnded(event_id="e", ts=9.0, **kw, attempt=1, state="FAILED", oom=True,
                   node="n1", tier="rtx3080ti", gpus=[0])  # fmt: skip
    cancel = JobCancelRequested(event_id="c", ts=10.0, **kw, by="u")

    def decision(events: list) -> str | None:
        logged = [Delivered(i, subject_for(e), e, {}) for i, e in enumerate(events, start=1)]
        retry = story(logged)[0].retry
        return None if retry is None else retry.decision

    assert decision([*run, end]) == "pending"
    assert decision([*run, end, cancel]) == "cancelled"
    # a cancel before the end leaves the decision to the dispatcher (X8): still open
    assert decision([*run, msgspec.structs.replace(cancel, ts=5.0), end]) == "pending"
