"""`jpu` as a user runs it: the CLI as a separate process against a gateway URL (the `server`
fixture of jpu.testing.api_fixtures), with the token in JPU_TOKEN.

Its working directory is the job's `chdir` (U5), so it is never the checkout's: a checkout may
sit in a private (0700) folder the job accounts cannot enter, or outside the site's
workdir_roots (SEC1). Without a `cwd`, the CLI runs in a directory of its own under /tmp
(allowed: a subdirectory of /tmp) that every account can enter."""

from __future__ import annotations

import asyncio
import atexit
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path

from jpu.testing.api import token_of

Run = tuple[int, str, str]


@functools.cache
def project_dir() -> Path:
    """A folder like a user's project: 0755 (the job accounts may enter it, U5) under /tmp
    (SEC1), whatever folder the tests run from. One per test process."""
    d = Path(tempfile.mkdtemp(prefix="jpu-test-", dir="/tmp"))
    d.chmod(0o755)
    atexit.register(shutil.rmtree, d, True)  # with what the jobs wrote there
    return d


async def jpu(
    server: str, who: str, *argv: str, home: Path | None = None, cwd: Path | None = None
) -> Run:
    """Run the CLI as a separate process (from `cwd`, e.g. a project folder, U5); the token of
    `who` (token_of) goes in JPU_TOKEN as a user would set it."""
    env = {**os.environ, "JPU_URL": server, "JPU_TOKEN": token_of(who)}
    if home is not None:
        env["HOME"] = str(home)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-P", "-m", "jpu.cli.main", *argv, env=env, cwd=cwd or project_dir(),
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
        *raw_argv(*args), env=raw_env(url, who), cwd=cwd or project_dir(),
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
