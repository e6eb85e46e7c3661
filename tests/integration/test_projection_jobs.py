"""The job view: a fold of job events (SPEC S1–S3), checked on a real PostgreSQL."""

from __future__ import annotations

import itertools

import asyncpg
import pytest

from jpu.bus.model import Delivered
from jpu.events import (
    Event,
    JobCancelRequested,
    JobDispatched,
    JobEnded,
    JobPromoted,
    JobRetryDeclined,
    JobRetryScheduled,
    JobStarted,
    JobSubmitted,
    ReservationGrown,
    ReservationReleased,
    ReservationStarted,
    UsageCharged,
    new_event_id,
    subject_for,
)
from jpu.store import apply_batch
from jpu.store.projections import jobs
from jpu.testing.fold import as_log, fold


class Story:
    """Builds one job's events with increasing ts; `feed` applies them as a bus would."""

    def __init__(self, job_id: str = "j1") -> None:
        self.job_id = job_id
        self.ts = itertools.count(100)

    def _kw(self) -> dict:
        return {"event_id": new_event_id(), "ts": float(next(self.ts)), "job_id": self.job_id}

    def submitted(self, num_gpus: int = 2) -> JobSubmitted:
        return JobSubmitted(
            **self._kw(),
            lab="BCG",
            user="alice",
            name="train",
            command="python train.py",
            num_gpus=num_gpus,
            tiers=["rtx4090"],
            env={"SEED": "1"},
            time_limit_s=3600,
        )

    def promoted(self) -> JobPromoted:
        kw = self._kw()
        return JobPromoted(**kw, queue_entered_at=kw["ts"])

    def reserve(self, gpus=(0,)) -> ReservationStarted:
        return ReservationStarted(**self._kw(), node="n1", tier="rtx4090", gpus=list(gpus))

    def grow(self, gpus=(0, 1)) -> ReservationGrown:
        return ReservationGrown(**self._kw(), node="n1", tier="rtx4090", gpus=list(gpus))

    def release(self, reason: str) -> ReservationReleased:
        return ReservationReleased(
            **self._kw(),
            node="n1",
            tier="rtx4090",
            gpus=[0],
            reason=reason,
            gpu_seconds=60.0,
            charged_now=reason == "demoted",
            tflops=82.6,
        )

    def dispatched(self, attempt: int = 1) -> JobDispatched:
        return JobDispatched(**self._kw(), attempt=attempt, node="n1", tier="rtx4090", gpus=[0, 1])

    def started(self, attempt: int = 1) -> JobStarted:
        return JobStarted(
            **self._kw(), attempt=attempt, backend_job_id="4242", isolation="unshare-net"
        )

    def ended(self, state: str = "COMPLETED", attempt: int = 1, **kw) -> JobEnded:
        return JobEnded(
            **self._kw(),
            attempt=attempt,
            state=state,
            exit_code=0,
            node="n1",
            tier="rtx4090",
            gpus=[0, 1],
            **kw,
        )

    def retry(self, attempt: int = 2) -> JobRetryScheduled:
        return JobRetryScheduled(**self._kw(), attempt=attempt, min_vram_gb=25)

    def cancel(self) -> JobCancelRequested:
        return JobCancelRequested(**self._kw(), by="alice")


class Feeder:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.seq = itertools.count(1)

    async def __call__(self, *events: Event) -> asyncpg.Record:
        batch = [Delivered(next(self.seq), subject_for(e), e, {}) for e in events]
        await apply_batch(self.pool, jobs.projection, batch)
        return await self.pool.fetchrow("SELECT * FROM jobs WHERE job_id = $1", events[0].job_id)


@pytest.fixture
def feed(pool: asyncpg.Pool) -> Feeder:
    return Feeder(pool)


# --- the state machine: the domain's fold (jpu.domain.states), as the rows show it ---------------


def _row(events: list[Event]) -> dict | None:
    """The jobs projection's row after `events` (its evolve, the domain's fold underneath)."""
    row = None
    for d in as_log(events):
        row = jobs.evolve(row, d)
    return row


def _to(state: str, s: Story) -> list[Event]:
    queued = [s.submitted(), s.promoted()]
    return {
        "PERSONAL_QUEUE_WAIT": [s.submitted()],
        "GLOBAL_QUEUE_WAIT": queued,
        "RESERVING": [*queued, s.reserve()],
        "DISPATCHED": [*queued, s.dispatched()],
        "RUNNING": [*queued, s.dispatched(), s.started()],
        "CANCELLING": [*queued, s.dispatched(), s.started(), s.cancel()],
        "COMPLETED": [*queued, s.dispatched(), s.started(), s.ended("COMPLETED")],
        "FAILED": [*queued, s.dispatched(), s.started(), s.ended("FAILED")],
        "CANCELLED": [s.submitted(), s.cancel(), s.ended("CANCELLED")],
    }[state]


def test_S3_state_table_is_the_services_row() -> None:
    s = Story()
    cases = [
        ("PERSONAL_QUEUE_WAIT", s.promoted(), "GLOBAL_QUEUE_WAIT"),
        ("GLOBAL_QUEUE_WAIT", s.reserve(), "RESERVING"),
        ("RESERVING", s.grow(), "RESERVING"),
        ("RESERVING", s.release("demoted"), "GLOBAL_QUEUE_WAIT"),
        ("RESERVING", s.release("maintenance"), "GLOBAL_QUEUE_WAIT"),
        ("RESERVING", s.release("capacity"), "GLOBAL_QUEUE_WAIT"),
        # SPEC E3: a swap release appended without its dispatch (lease lost between
        # the two appends) returns the job to the queue, in the dispatcher and here alike
        ("RESERVING", s.release("swap"), "GLOBAL_QUEUE_WAIT"),
        ("RESERVING", s.dispatched(), "DISPATCHED"),
        ("GLOBAL_QUEUE_WAIT", s.dispatched(), "DISPATCHED"),
        ("PERSONAL_QUEUE_WAIT", s.dispatched(), "PERSONAL_QUEUE_WAIT"),  # not in the queue
        ("DISPATCHED", s.started(), "RUNNING"),
        ("RUNNING", s.ended("COMPLETED"), "COMPLETED"),
        ("RUNNING", s.ended("FAILED"), "FAILED"),
        ("RUNNING", s.retry(2), "RUNNING"),  # X8: a retry only follows an OOM end
        ("PERSONAL_QUEUE_WAIT", s.cancel(), "CANCELLING"),
        ("RUNNING", s.cancel(), "CANCELLING"),
        ("CANCELLING", s.cancel(), "CANCELLING"),
        ("CANCELLING", s.ended("CANCELLED"), "CANCELLED"),
        ("PERSONAL_QUEUE_WAIT", s.ended("CANCELLED"), "CANCELLED"),  # intake ends it directly
        ("CANCELLING", s.retry(2), "CANCELLING"),  # a cancelled job is not retried
    ]
    for current, event, expected in cases:
        row = _row([*_to(current, Story()), event])
        assert row is not None and row["state"] == expected, (current, type(event).__name__)
    assert _row([s.promoted()]) is None  # no job yet


@pytest.mark.parametrize("terminal", ["COMPLETED", "FAILED", "CANCELLED"])
def test_S2_a_terminal_job_never_changes_state(terminal: str) -> None:
    s = Story()
    for e in (s.promoted(), s.reserve(), s.dispatched(), s.started(), s.ended("FAILED"),
              s.retry(), s.cancel()):  # fmt: skip
        row = _row([*_to(terminal, Story()), e])
        assert row is not None and row["state"] == terminal, type(e).__name__


def test_E3_rows_carry_the_services_job_view() -> None:
    """The row's view is exactly what the services' fold holds for the job."""
    from jpu.config import load_config
    from jpu.domain.cluster import ClusterState

    s = Story()
    events = [
        *(s.submitted(), s.promoted(), s.reserve(), s.release("swap"), s.reserve([1])),
        *(s.dispatched(), s.started(), s.ended("FAILED", oom=True, reason="OOM"), s.retry(2)),
    ]
    state = fold(as_log(events), ClusterState.new(load_config(env={})))
    row = _row(events)
    assert row is not None
    assert jobs._view(row) == state.jobs["j1"]
    assert (row["state"], row["attempt"], row["min_vram_gb"]) == ("GLOBAL_QUEUE_WAIT", 2, 25)


# --- the fold on PostgreSQL ------------------------------------------------------------------


async def test_S3_full_lifecycle_with_reservation(feed: Feeder) -> None:
    s = Story()
    row = await feed(s.submitted())
    assert (row["state"], row["attempt"], row["lab"], row["user"]) == (
        "PERSONAL_QUEUE_WAIT",
        1,
        "BCG",
        "alice",
    )
    assert row["env"] == {"SEED": "1"} and row["tiers"] == ["rtx4090"]
    row = await feed(s.promoted())
    assert row["state"] == "GLOBAL_QUEUE_WAIT" and row["queue_entered_at"] == 101.0
    row = await feed(s.reserve([0]))
    assert row["state"] == "RESERVING"
    assert (row["reservation_node"], row["reservation_gpus"], row["reservation_since"]) == (
        "n1",
        [0],
        102.0,
    )
    row = await feed(s.grow([0, 1]))
    assert row["state"] == "RESERVING" and row["reservation_gpus"] == [0, 1]
    row = await feed(s.dispatched(), s.release("dispatched"))
    assert row["state"] == "DISPATCHED" and row["reservation_node"] is None
    assert (row["node"], row["tier"], row["gpus"]) == ("n1", "rtx4090", [0, 1])
    row = await feed(s.started())
    assert row["state"] == "RUNNING" and row["backend_job_id"] == "4242"
    assert row["isolation"] == "unshare-net"
    row = await feed(s.ended("COMPLETED"))
    assert row["state"] == "COMPLETED" and row["exit_code"] == 0 and row["ended_at"] == 107.0


async def test_R3_demotion_returns_job_to_global_queue_keeping_queue_entered_at(
    feed: Feeder,
) -> None:
    s = Story()
    await feed(s.submitted(), s.promoted(), s.reserve())
    row = await feed(s.release("demoted"))
    assert row["state"] == "GLOBAL_QUEUE_WAIT"
    assert row["queue_entered_at"] == 101.0 and row["reservation_node"] is None
    row = await feed(s.reserve([1]))  # may reserve again from zero
    assert row["state"] == "RESERVING" and row["reservation_gpus"] == [1]


async def test_X8_oom_end_then_dispatcher_retry_requeues_the_job(feed: Feeder) -> None:
    """The live order: the agent reports the OOM end, then the dispatcher schedules the retry."""
    s = Story()
    await feed(s.submitted(), s.promoted(), s.dispatched(), s.started())
    row = await feed(s.ended("FAILED", attempt=1, oom=True, reason="OOM"))
    assert row["state"] == "FAILED" and row["oom"] is True
    row = await feed(s.retry(2))
    assert (row["state"], row["attempt"], row["min_vram_gb"]) == ("GLOBAL_QUEUE_WAIT", 2, 25)
    assert row["queue_entered_at"] == 101.0 and row["ended_at"] is None
    assert (await feed(s.retry(2)))["attempt"] == 2  # a duplicate retry changes nothing


async def test_X8_declined_retry_leaves_the_job_failed_for_good_and_frees_its_slot(
    feed: Feeder,
) -> None:
    """The OOM end holds the slot (oom_pending) until the dispatcher records its decision."""
    s = Story()
    await feed(s.submitted(), s.promoted(), s.dispatched(), s.started())
    row = await feed(s.ended("FAILED", attempt=1, oom=True, reason="OOM"))
    assert row["state"] == "FAILED" and row["oom_pending"] is True
    declined = JobRetryDeclined(**s._kw(), attempt=1, reason="no_fit", needed_vram_gb=25)
    row = await feed(declined)
    assert (row["state"], row["oom_pending"], row["end_reason"]) == ("FAILED", False, "OOM")
    row = await feed(s.retry(2))  # never revived (S2)
    assert (row["state"], row["attempt"]) == ("FAILED", 1)


async def test_cancel_while_queued_and_while_running(feed: Feeder) -> None:
    q, r = Story("q1"), Story("r1")
    row = await feed(q.submitted(), q.cancel())
    assert row["state"] == "CANCELLING" and row["cancel_requested_by"] == "alice"
    row = await feed(q.ended("CANCELLED"))
    assert row["state"] == "CANCELLED"

    await feed(r.submitted(), r.promoted(), r.dispatched(), r.cancel())
    row = await feed(r.started())  # the start raced the cancel: recorded, still cancelling
    assert row["state"] == "CANCELLING" and row["backend_job_id"] == "4242"
    row = await feed(r.ended("CANCELLED", kill_failed=True))
    assert row["state"] == "CANCELLED" and row["kill_failed"] is True


async def test_S2_terminal_job_never_changes(feed: Feeder, pool: asyncpg.Pool) -> None:
    s = Story()
    done = await feed(s.submitted(), s.promoted(), s.dispatched(), s.started(), s.ended("FAILED"))
    assert done["state"] == "FAILED"
    for e in (
        s.promoted(),
        s.reserve(),
        s.dispatched(),
        s.started(),
        s.ended("COMPLETED"),
        s.retry(2),
        s.cancel(),
        s.submitted(),
    ):
        row = await feed(e)
        # every column the API reads stays; only the view's bookkeeping (the subject's last
        # seq, for E2's expected sequence) follows the log
        visible = {k: v for k, v in dict(row).items() if k != "view"}
        assert visible == {k: v for k, v in dict(done).items() if k != "view"}, type(e).__name__


async def test_F4_usage_charged_after_end_is_recorded_on_the_job(feed: Feeder) -> None:
    s = Story()
    await feed(s.submitted(), s.promoted(), s.dispatched(), s.started(), s.ended("COMPLETED"))
    charge = UsageCharged(
        event_id=new_event_id(),
        ts=200.0,
        lab="BCG",
        amount=297360.0,
        value_after=297360.0,
        as_of=200.0,
        job_id="j1",
    )
    row = await feed(charge)
    assert row["state"] == "COMPLETED" and row["usage_charged"] == 297360.0


async def test_events_of_unknown_jobs_are_ignored(feed: Feeder, pool: asyncpg.Pool) -> None:
    await feed(Story("ghost").promoted())
    assert await pool.fetchval("SELECT count(*) FROM jobs") == 0
