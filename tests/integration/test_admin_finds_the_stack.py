"""`jpu-admin explain-usage` finds the running stack's NATS (SPEC O1, O2) or says in one sentence
why it cannot — never a traceback, never the built-in default URL, which may be another
platform's server. A real `python -m jpu.tools.admin` process against a real NATS JetStream."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from jpu.bus import EventBus
from jpu.stack import discover
from jpu.testing.nats_fixtures import unique_names

_SERVER_KEYS = ("JPU_NATS_URL", "JPU_DATABASE_URL", "JPU_CONFIG", "JPU_STREAM_NAME")


def _env(data_dir: Path, **over: str) -> dict[str, str]:
    """No server configured: as on a fresh shell in the checkout, with its own data dir."""
    env = {k: v for k, v in os.environ.items() if k not in _SERVER_KEYS}
    return {**env, "JPU_DATA_DIR": str(data_dir), **over}


async def _admin(env: dict[str, str], *argv: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jpu.tools.admin", *argv, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out.decode(), err.decode()


def _one_sentence(err: str) -> str:
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


async def test_O1_explain_usage_on_a_server_without_the_stream_says_so(
    nats_url: str, tmp_path: Path
) -> None:
    """The crash as seen: a NATS that is not this platform's answered "stream not found"."""
    stream, _ = unique_names()
    env = _env(tmp_path, JPU_NATS_URL=nats_url, JPU_STREAM_NAME=stream)
    rc, out, err = await _admin(env, "explain-usage", "BCG")
    assert (rc, out) == (1, "")
    assert _one_sentence(err).startswith(
        f"jpu-admin explain-usage: NATS at {nats_url} has no stream '{stream}': it is not this "
        "platform's server"
    )


async def test_O2_explain_usage_with_no_configuration_uses_the_running_stack(
    nats_url: str, tmp_path: Path
) -> None:
    stream, prefix = unique_names()
    bus = await EventBus.connect(nats_url, stream=stream, prefix=prefix, name="pytest-admin")
    try:
        await bus.ensure_stream()
        # what `make run` records while it runs (this process stands for the stack)
        discover.record(tmp_path, {"nats_url": nats_url, "database_url": "postgresql://x/y"})
        env = _env(tmp_path, JPU_STREAM_NAME=stream, JPU_SUBJECT_PREFIX=prefix)
        rc, out, err = await _admin(env, "explain-usage", "BCG", "--json")
        assert rc == 0, err
        assert '"lab": "BCG"' in out
        discover.forget(tmp_path)
        assert not (tmp_path / discover.FILE).exists()
    finally:
        await bus.delete_stream()
        await bus.close()


async def test_O2_explain_usage_with_no_configuration_and_no_stack_says_what_to_do(
    tmp_path: Path,
) -> None:
    dead = subprocess.Popen(["true"])  # a pid that has ended: a stack that crashed
    dead.wait()
    (tmp_path / discover.FILE).write_text(f'{{"pid": {dead.pid}, "nats_url": "nats://x:1"}}')
    assert discover.running(tmp_path) is None
    for argv in (("explain-usage", "BCG"), ("usage-statement", "--db")):
        rc, out, err = await _admin(_env(tmp_path), *argv)
        assert (rc, out) == (1, "")
        key = "database_url" if "--db" in argv else "nats_url"
        assert _one_sentence(err).startswith(f"jpu-admin {argv[0]}: no {key} configured (")
        assert f"no running stack recorded in {tmp_path / discover.FILE}" in err
        assert "`make run`" in err
    rc, out, err = await _admin(_env(tmp_path), "lab", "list")  # the database commands too
    assert (rc, out) == (2, "") and _one_sentence(err).startswith("jpu-admin: no database_url")
