"""A Slurm user's mail-on-end script, as a new user would try it on `make run`'s stack (SPEC Q10):
`jpu notify` registers a webhook, `jpu submit` a script with `#SBATCH --mail-type=END` and
`--mail-user`, the job runs on the local backend, and the notifier (one of the supervised
services) sends the e-mail to a real SMTP receiver and the message to a real HTTP receiver."""

from __future__ import annotations

import asyncio
import mailbox
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from jpu.testing.cli import project_dir
from jpu.testing.nats_fixtures import unique_names
from jpu.testing.receivers import Received, Webhook, until
from jpu.testing.stack_process import StackProcess, remove_data_dir, world_searchable_tmpdir


@pytest.fixture
def data_dir() -> Iterator[Path]:
    d = world_searchable_tmpdir()
    yield d
    remove_data_dir(d)


def jpu(stack: StackProcess, *argv: str, cwd: Path) -> str:
    env = {**os.environ, "JPU_URL": stack.url, "JPU_TOKEN": stack.token("bcg-alice")}
    run = subprocess.run(
        [sys.executable, "-m", "jpu.cli.main", *argv],
        env=env, cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return run.stdout


async def _notifier_up(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:

        async def up() -> bool:
            try:
                return bool(await conn.fetchval("SELECT count(*) FROM notifier_position"))
            except asyncpg.UndefinedTableError:
                return False

        await until(up, "the notifier to start", 60)
    finally:
        await conn.close()


async def test_sbatch_mail_on_end_script_runs_unchanged_on_the_stack_Q10(
    nats_url: str,
    pg_dsn: str,
    data_dir: Path,
    smtp: tuple[int, Received],
    webhook: Webhook,
) -> None:
    webhook.start()
    stream, prefix = unique_names()
    stack = StackProcess(
        {"JPU_NATS_URL": nats_url, "JPU_DATABASE_URL": pg_dsn, "JPU_STREAM_NAME": stream,
         "JPU_SUBJECT_PREFIX": prefix, "JPU_SMTP_HOST": "127.0.0.1",
         "JPU_SMTP_PORT": str(smtp[0]), "JPU_WEBHOOK_ALLOW_NETWORKS": "[127.0.0.0/8]"},
        data_dir,
    )  # fmt: skip
    try:
        stack.wait_ready()
        await _notifier_up(pg_dsn)
        jpu(stack, "notify", "--webhook", webhook.url, cwd=data_dir)
        script = data_dir / "train.sh"
        script.write_text(
            "#!/bin/bash\n#SBATCH --job-name=train\n#SBATCH --mail-type=END\n"
            "#SBATCH --mail-user=alice@lab.example\nexit 3\n"
        )
        jpu(stack, "submit", str(script), cwd=project_dir())  # SEC1: never the data dir
        await until(
            lambda: asyncio.sleep(0, bool(webhook.got.items) and bool(smtp[1].items)),
            "the e-mail and the webhook message",
            60,
        )
        (mail,) = smtp[1].items
        assert mail["to"] == ["alice@lab.example"] and mail["subject"].endswith(" END")
        text = mail["text"]
        assert " (train) ended FAILED with exit code 3 (NonZeroExitCode) after " in text, text
        assert f"{stack.url}/#/job/" in text and " TFLOP-s: " in text
        assert webhook.got.texts() == [text]
    finally:
        assert stack.stop() == 0, stack.log_tail()


async def test_Q10_make_run_without_smtp_keeps_the_mail_in_its_local_maildir(
    nats_url: str,
    pg_dsn: str,
    data_dir: Path,
) -> None:
    """`make run` on a site naming no SMTP server: the stack's own sink (a real aiosmtpd SMTP
    server) takes what the real notifier sends, into <data_dir>/mail, a maildir; the banner
    says where, and the submit says nothing of e-mail (this site does send it)."""
    stream, prefix = unique_names()
    stack = StackProcess(
        {"JPU_NATS_URL": nats_url, "JPU_DATABASE_URL": pg_dsn, "JPU_STREAM_NAME": stream,
         "JPU_SUBJECT_PREFIX": prefix, "JPU_SMTP_HOST": None, "JPU_SMTP_PORT": None},
        data_dir,
    )  # fmt: skip
    try:
        stack.wait_ready()
        maildir = data_dir / "mail"
        said = f"  e-mail          {maildir}/new/ (a local sink: nothing leaves)"

        async def banner_read() -> bool:
            return said in stack.lines

        await until(banner_read, "the banner's e-mail line", 10)
        await _notifier_up(pg_dsn)
        env = {**os.environ, "JPU_URL": stack.url, "JPU_TOKEN": stack.token("bcg-alice")}
        run = subprocess.run(
            [sys.executable, "-m", "jpu.cli.main", "submit", "--parsable", "--job-name=train",
             "--mail-type=END", "--mail-user=alice@lab.example", "--wrap", "exit 3"],
            env=env, cwd=project_dir(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert run.returncode == 0 and "e-mail" not in run.stderr, run.stderr
        job_id = run.stdout.strip()
        box = mailbox.Maildir(maildir, create=False)

        async def arrived() -> bool:
            return len(box) > 0

        await until(arrived, "the e-mail in the maildir", 90)
        (mail,) = list(box)
        assert mail["Delivered-To"] == "alice@lab.example" and mail["To"] == "alice@lab.example"
        assert mail["Subject"].endswith(" END") and job_id in mail["Subject"]
        payload = mail.get_payload(decode=True)
        assert isinstance(payload, bytes)
        assert " (train) ended FAILED with exit code 3 (NonZeroExitCode) after " in (
            payload.decode()
        )
        assert len(list((maildir / "new").iterdir())) == 1  # one file per message, unread
    finally:
        assert stack.stop() == 0, stack.log_tail()
