"""The notifier service (SPEC Q10) as a real process on real NATS and PostgreSQL, delivering to a
real SMTP receiver (aiosmtpd) and a real HTTP receiver (the webhook), in this test's threads.

Guarantee under test: at-least-once. The sent-log row is recorded `pending` when decided and
marked `sent` after the receiver accepted it; a notifier SIGKILLed between the two sends that
one notification again after its restart (at most one duplicate per kill) and loses none.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import pytest_asyncio

from jpu.bus import EventBus
from jpu.events import (
    Event,
    JobArray,
    JobRetryScheduled,
    new_event_id,
)
from jpu.testing.notifier import CONSOLE, Notifier, started
from jpu.testing.notifier import job_ended as _end
from jpu.testing.notifier import job_started as _start
from jpu.testing.notifier import job_submitted as _job
from jpu.testing.notifier import notification_settings as _settings
from jpu.testing.receivers import Received, Webhook, until


@pytest_asyncio.fixture
async def notifier(
    nats_url: str, bus: EventBus, pg_dsn: str, smtp: tuple[int, Received], tmp_path: Path
) -> AsyncIterator[Notifier]:
    n = Notifier(nats_url, bus, pg_dsn, smtp[0], tmp_path / "notifier.log")
    try:
        yield n
    finally:
        n.stop()


async def _append(bus: EventBus, events: list[Event]) -> None:
    for e in events:
        await bus.append(e)


async def _all_sent(pg_dsn: str, n: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        conn = await asyncpg.connect(pg_dsn)
        try:
            rows = await conn.fetch("SELECT state FROM notification_sent")
        finally:
            await conn.close()
        return len(rows) == n and all(r["state"] == "sent" for r in rows)

    return check


async def test_end_fail_requeue_delivered_once_with_the_sentence_Q10(
    bus: EventBus, pg_dsn: str, smtp: tuple[int, Received], webhook: Webhook, notifier: Notifier
) -> None:
    webhook.start()
    await started(notifier, pg_dsn)
    t = 1_000.0
    await _append(bus, [
        _settings(webhook.url, ["END", "FAIL", "REQUEUE"]),  # defaults: e-mail and webhook
        _job("ok", t, mail_type=["END"], mail_user="bob@lab.example"),  # its own address
        _start("ok", t + 1), _end("ok", t + 3724, "COMPLETED", exit_code=0, usage=297_360.0),
        _job("bad", t), _start("bad", t + 1),
        _end("bad", t + 11, "FAILED", exit_code=2, reason="NonZeroExitCode", usage=826.0),
        _job("oom", t), _start("oom", t + 1),
        _end("oom", t + 61, "FAILED", oom=True, reason="OOM", usage=100.0),
        JobRetryScheduled(event_id=new_event_id(), ts=t + 62, job_id="oom", attempt=2,
                          min_vram_gb=24),
    ])  # fmt: skip
    # each: one e-mail (ok's to its own mail_user) and one POST to alice's webhook
    await until(await _all_sent(pg_dsn, 6), "six notifications sent")
    mails, hooks = smtp[1].items, webhook.got.items
    assert sorted((m["to"][0], m["subject"]) for m in mails) == [
        ("alice@lab.example", "[JPU-Share] n-bad (bad) FAIL"),
        ("alice@lab.example", "[JPU-Share] n-oom (oom) REQUEUE"),
        ("bob@lab.example", "[JPU-Share] n-ok (ok) END"),
    ]
    texts = Counter(smtp[1].texts() + webhook.got.texts())
    assert texts == {
        "Job ok (n-ok) ended COMPLETED with exit code 0 after 1h 02m 03s on attempt 1, charged "
        f"297,360 TFLOP-s: {CONSOLE}/#/job/ok": 2,
        "Job bad (n-bad) ended FAILED with exit code 2 (NonZeroExitCode) after 10s on attempt 1, "
        f"charged 826 TFLOP-s: {CONSOLE}/#/job/bad": 2,
        "Job oom (n-oom) ran out of GPU memory on attempt 1 and was requeued as attempt 2 "
        f"needing at least 24 GB of VRAM (X8), charged 100 TFLOP-s so far: {CONSOLE}/#/job/oom": 2,
    }
    assert [h["path"] for h in hooks] == ["/hook"] * 3


async def test_killed_between_sending_and_recording_resends_at_most_once_loses_none_Q10(
    bus: EventBus, pg_dsn: str, smtp: tuple[int, Received], webhook: Webhook, notifier: Notifier
) -> None:
    """SIGKILL arrives while the webhook receiver holds the first POST: the receiver has it, the
    sent-log does not. After the restart it comes once more; every other one arrives."""
    webhook.start()
    await started(notifier, pg_dsn)
    first, killed = threading.Event(), threading.Event()

    def kill_first(_: dict[str, Any]) -> None:
        if not first.is_set():
            first.set()
            assert notifier.proc is not None
            os.kill(notifier.proc.pid, signal.SIGKILL)  # before answering: nothing recorded
            notifier.proc.wait()
            killed.set()  # only now: the test goes on once the notifier is gone

    webhook.got.on_arrival = kill_first
    t = 2_000.0
    events: list[Event] = [_settings(webhook.url, ["END"])]
    for i in range(6):
        events += [
            _job(f"j{i}", t),
            _start(f"j{i}", t + 1),
            _end(f"j{i}", t + 5, "COMPLETED", exit_code=0, usage=1.0),
        ]
    await _append(bus, events[:4])  # the first job: its POST kills the notifier
    await until(lambda: asyncio.sleep(0, killed.is_set()), "the first webhook POST")
    await _append(bus, events[4:])  # five more jobs end while the notifier is dead
    assert not notifier.alive()
    await started(notifier, pg_dsn)
    await until(await _all_sent(pg_dsn, 12), "twelve notifications sent after the restart")
    for got in (webhook.got, smtp[1]):
        counts = Counter(got.texts())
        assert len(counts) == 6  # none lost: every job's end, on each channel
        assert set(counts.values()) <= {1, 2}  # at most one duplicate each
    assert Counter(webhook.got.texts())[webhook.got.items[0]["text"]] == 2  # the killed one
    assert sum(Counter(webhook.got.texts() + smtp[1].texts()).values()) <= 12 + 2


async def test_receiver_down_then_up_delivered_after_backoff_without_blocking_mail_Q10(
    bus: EventBus, pg_dsn: str, smtp: tuple[int, Received], webhook: Webhook, notifier: Notifier
) -> None:
    await started(notifier, pg_dsn)  # the webhook receiver is not listening yet
    await _append(bus, [
        _settings(webhook.url, ["END"]),
        _job("slow", 3_000.0), _end("slow", 3_010.0, "CANCELLED", reason="cancelled"),
    ])  # fmt: skip
    conn = await asyncpg.connect(pg_dsn)
    try:

        async def retried() -> bool:
            row = await conn.fetchrow(
                "SELECT attempts, state FROM notification_sent WHERE channel = 'webhook'"
            )
            return row is not None and row["attempts"] >= 3 and row["state"] == "pending"

        await until(retried, "three refused tries of the webhook")
        assert len(smtp[1].items) == 1  # the e-mail of the same event went out meanwhile
        assert "ended CANCELLED (cancelled) without running" in smtp[1].items[0]["text"]
        webhook.start()
        await until(await _all_sent(pg_dsn, 2), "the webhook delivered once it is up")
        assert len(webhook.got.items) == 1
        attempts = await conn.fetchval(
            "SELECT attempts FROM notification_sent WHERE channel = 'webhook'"
        )
        assert attempts >= 4
    finally:
        await conn.close()


async def test_a_hanging_webhook_delays_no_other_notification_Q10(
    bus: EventBus, pg_dsn: str, smtp: tuple[int, Received], notifier: Notifier
) -> None:
    """A receiver that accepts the connection and never answers holds only its own sends (each
    until its timeout): every job's e-mail goes out meanwhile."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(64)  # accepted by the kernel, never read or answered
    try:
        await started(notifier, pg_dsn)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}/hook"
        events: list[Event] = [_settings(url, ["END"])]
        for i in range(5):
            events += [_job(f"h{i}", 4_000.0), _end(f"h{i}", 4_001.0, "COMPLETED", exit_code=0)]
        await _append(bus, events)
        await until(lambda: asyncio.sleep(0, len(smtp[1].items) == 5), "the five e-mails")
        conn = await asyncpg.connect(pg_dsn)
        try:
            hooks = await conn.fetch(
                "SELECT state, attempts FROM notification_sent WHERE channel = 'webhook'"
            )
        finally:
            await conn.close()
        assert [(r["state"], r["attempts"]) for r in hooks] == [("pending", 0)] * 5  # still hung
    finally:
        hung.close()


async def test_an_array_notifies_once_unless_asked_per_task_Q10_Q7(
    bus: EventBus, pg_dsn: str, smtp: tuple[int, Received], webhook: Webhook, notifier: Notifier
) -> None:
    """An array of four: one BEGIN and one END on the webhook (and by e-mail), not one per task;
    asked per task (ARRAY_TASKS) its two tasks notify one by one. A single job ended last is the
    positive signal that everything before it was decided (the log is followed in order)."""
    webhook.start()
    await started(notifier, pg_dsn)
    t = 5_000.0
    events: list[Event] = [
        _settings(webhook.url, ["BEGIN", "END", "FAIL"]),
        _job("arr", t, array=JobArray(tasks=[0, 1, 2, 3], throttle=2, spec="0-3%2")),
        _job("per", t, mail_type=["END", "ARRAY_TASKS"], array=JobArray(tasks=[0, 1], spec="0-1")),
    ]
    for k in range(4):
        state = "FAILED" if k == 3 else "COMPLETED"
        end = _end(f"arr_{k}", t + 10 * k + 5, state, exit_code=k // 3, usage=100.0)
        events += [_start(f"arr_{k}", t + 10 * k), end]
    events += [_end(f"per_{k}", t + 50, "COMPLETED", exit_code=0) for k in range(2)]
    events += [_job("last", t, mail_type=["END"]), _end("last", t + 60, "CANCELLED")]
    await _append(bus, events)
    # arr: BEGIN + FAIL, per: END twice, last: END — each by e-mail and webhook
    await until(await _all_sent(pg_dsn, 10), "ten notifications sent")
    hooks = sorted(webhook.got.texts())
    idle = "without running on attempt 1, charged 0 TFLOP-s"
    assert hooks == sorted([
        f"Array arr (n-arr) started: task arr_0 is the first of its 4 tasks to run: {CONSOLE}"
        "/#/job/arr",
        "Array arr (n-arr) ended: 3 COMPLETED, 1 FAILED of 4 tasks in 35s from first start to last "
        f"end, charged 400 TFLOP-s: {CONSOLE}/#/job/arr",
        f"Job per_0 (n-per) ended COMPLETED with exit code 0 {idle}: {CONSOLE}/#/job/per_0",
        f"Job per_1 (n-per) ended COMPLETED with exit code 0 {idle}: {CONSOLE}/#/job/per_1",
        f"Job last (n-last) ended CANCELLED {idle}: {CONSOLE}/#/job/last",
    ])  # fmt: skip
    subjects = sorted(m["subject"] for m in smtp[1].items)
    assert subjects[:2] == ["[JPU-Share] n-arr (arr) BEGIN", "[JPU-Share] n-arr (arr) FAIL"]


async def test_an_array_restarted_notifier_sends_its_begin_and_end_once_each_Q10_Q7(
    bus: EventBus, pg_dsn: str, smtp: tuple[int, Received], webhook: Webhook, notifier: Notifier
) -> None:
    """The notifier stops after the array's BEGIN went out and two of its three tasks ended;
    restarted, it folds the log again from the start (the BEGIN is not owed twice) and sends the
    END once the last task ends, counting the tasks that ended while it was down."""
    webhook.start()
    await started(notifier, pg_dsn)
    t = 6_000.0
    await _append(bus, [
        _settings(webhook.url, ["BEGIN", "END"]),
        _job("sw", t, array=JobArray(tasks=[0, 1, 2], spec="0-2")),
        _start("sw_0", t + 1), _end("sw_0", t + 5, "COMPLETED", exit_code=0, usage=10.0),
    ])  # fmt: skip
    await until(await _all_sent(pg_dsn, 2), "the array's BEGIN by e-mail and webhook")
    notifier.stop()
    await _append(bus, [_start("sw_1", t + 6), _end("sw_1", t + 9, "COMPLETED", usage=10.0)])
    notifier.start()
    await _append(bus, [_end("sw_2", t + 20, "CANCELLED")])
    await until(await _all_sent(pg_dsn, 4), "the array's END by e-mail and webhook")
    assert sorted(webhook.got.texts()) == [
        "Array sw (n-sw) ended: 2 COMPLETED, 1 CANCELLED of 3 tasks in 19s from first start to "
        f"last end, charged 20 TFLOP-s: {CONSOLE}/#/job/sw",
        "Array sw (n-sw) started: task sw_0 is the first of its 3 tasks to run: "
        f"{CONSOLE}/#/job/sw",
    ]
