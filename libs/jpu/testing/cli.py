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
