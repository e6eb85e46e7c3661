"""A Slurm user's mail-on-end script, as a new user would try it on `make run`'s stack (SPEC Q10):
`jpu notify` registers a webhook, `jpu submit` a script with `#SBATCH --mail-type=END` and
`--mail-user`, the job runs on the local backend, and the notifier (one of the supervised
services) sends the e-mail to a real SMTP receiver and the message to a real HTTP receiver."""

from __future__ import annotations

import asyncio
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
        conn = await asyncpg.connect(pg_dsn)
        try:

            async def notifier_up() -> bool:
                try:
                    return bool(await conn.fetchval("SELECT count(*) FROM notifier_position"))
                except asyncpg.UndefinedTableError:
                    return False

            await until(notifier_up, "the notifier to start", 60)
        finally:
            await conn.close()
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
