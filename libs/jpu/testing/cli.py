"""`jpu` as a user runs it: the CLI as a separate process against a gateway URL (the `server`
fixture of tests/integration/conftest.py), with the token in JPU_TOKEN."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from jpu.testing.api import token_of

Run = tuple[int, str, str]


async def jpu(
    server: str, who: str, *argv: str, home: Path | None = None, cwd: Path | None = None
) -> Run:
    """Run the CLI as a separate process (from `cwd`, e.g. a project folder, U5); the token of
    `who` (token_of) goes in JPU_TOKEN as a user would set it."""
    env = {**os.environ, "JPU_URL": server, "JPU_TOKEN": token_of(who)}
    if home is not None:
        env["HOME"] = str(home)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "jpu.cli.main", *argv, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out.decode(), err.decode()


def ok(run: Run) -> str:
    rc, out, err = run
    assert rc == 0, err
    return out


def failed(run: Run, code: str) -> str:
    rc, out, err = run
    assert rc == 1 and out == "", (rc, out, err)
    assert err.count("\n") == 1 and f": error: {code}: " in err, err  # one line: code + message
    return err


# the same with stdout as bytes: `jpu logs` / `jpu get` print a job's output as it is
RawRun = tuple[int, bytes, str]


def raw_argv(*args: str) -> list[str]:
    return [sys.executable, "-P", "-m", "jpu.cli.main", *args]


def raw_env(url: str, who: str) -> dict[str, str]:
    return {**os.environ, "JPU_URL": url, "JPU_TOKEN": token_of(who)}


async def jpu_raw(url: str, who: str, *args: str, cwd: Path | None = None) -> RawRun:
    """`jpu` as a separate process whose stdout is kept as bytes (job output is any bytes)."""
    proc = await asyncio.create_subprocess_exec(
        *raw_argv(*args), env=raw_env(url, who), cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return int(proc.returncode or 0), out, err.decode()


def ok_raw(run: RawRun) -> bytes:
    rc, out, err = run
    assert rc == 0, err
    return out


def failed_raw(run: RawRun, code: str, command: str = "logs") -> str:
    """`jpu COMMAND` refused: one line with the API's code, nothing on stdout, exit 1."""
    rc, out, err = run
    assert rc == 1 and out == b"", (rc, out, err)
    assert err.count("\n") == 1 and f"jpu {command}: error: {code}: " in err, err
    return err
