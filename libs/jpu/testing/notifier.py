"""The notifier service (SPEC Q10) as a real process for the tests: `Notifier` runs
`python -m jpu_services.notifier` on a test's stream and database, `started` waits until it is up,
and the events a notification test appends (a job submitted, started, ended; a user's settings).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg

from jpu.bus import EventBus
from jpu.events import (
    JobEnded,
    JobStarted,
    JobSubmitted,
    NotificationSettingsChanged,
    new_event_id,
)
from jpu.testing.receivers import until

CONSOLE = "http://console.example:8080"


class Notifier:
    """`python -m jpu_services.notifier` against this test's stream and database."""

    def __init__(self, nats_url: str, bus: EventBus, dsn: str, smtp_port: int, log: Path) -> None:
        self.env = {
            **os.environ,
            "JPU_NATS_URL": nats_url,
            "JPU_DATABASE_URL": dsn,
            "JPU_STREAM_NAME": bus.stream,
            "JPU_SUBJECT_PREFIX": bus.prefix,
            "JPU_SMTP_HOST": "127.0.0.1",
            "JPU_SMTP_PORT": str(smtp_port),
            "JPU_CONSOLE_URL": CONSOLE,
            "JPU_NOTIFY_RETRY_BASE_S": "0.2",
            "JPU_NOTIFY_RETRY_MAX_S": "1.0",
            "JPU_NOTIFY_POLL_S": "0.1",
            # the receivers are on loopback: a site network these tests allow (SEC4)
            "JPU_WEBHOOK_ALLOW_NETWORKS": "[127.0.0.0/8]",
        }
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-P", "-m", "jpu_services.notifier"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "ab"),  # noqa: SIM115
        )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def started(n: Notifier, pg_dsn: str) -> None:
    """The notifier is up once it recorded where it starts (its first position)."""
    n.start()
    conn = await asyncpg.connect(pg_dsn)
    try:

        async def ready() -> bool:
            assert n.alive(), n.log.read_text()[-3000:]
            with contextlib.suppress(asyncpg.UndefinedTableError):
                return await conn.fetchval("SELECT count(*) FROM notifier_position") == 1
            return False

        await until(ready, "the notifier to start", 60)
    finally:
        await conn.close()


def job_submitted(job: str, t: float, **kw: Any) -> JobSubmitted:
    return JobSubmitted(
        event_id=new_event_id(), ts=t, job_id=job, lab="BCG", user="alice", name=f"n-{job}",
        command="true", num_gpus=1, **kw,
    )  # fmt: skip


def job_started(job: str, t: float, attempt: int = 1) -> JobStarted:
    return JobStarted(
        event_id=new_event_id(), ts=t, job_id=job, attempt=attempt, backend_job_id="b"
    )


def job_ended(job: str, t: float, state: str, **kw: Any) -> JobEnded:
    return JobEnded(
        event_id=new_event_id(), ts=t, job_id=job, attempt=kw.pop("attempt", 1),
        state=state, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


def notification_settings(webhook_url: str, kinds: list[str]) -> NotificationSettingsChanged:
    return NotificationSettingsChanged(
        event_id=new_event_id(), ts=0.0, user="alice", email="alice@lab.example",
        webhook_url=webhook_url, mail_type=kinds,
    )  # fmt: skip
