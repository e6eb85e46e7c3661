"""SPEC X4, O5 — found by the crash-safety run (tests/e2e/test_crash_safety.py, seed 364713 with
fresh accounts): a slurm-agent killed while its `useradd` ran. Its supervisor then kills the
agent's whole process group (jpu.stack, "anything it left behind"), so the useradd died halfway
through rewriting /etc/passwd and its shadows: an account vanished and came back with another
UID, and a job launched meanwhile failed in `setpriv: uid 971 not found` before its first line.

The account is created in a session of its own, so whatever kills the agent's group lets it
finish. Real useradd, real signals: a `useradd` first on PATH kills the caller's process group
the moment it starts (the supervisor's SIGKILL, at the worst time), then runs the real one.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("as_root")  # creates Unix accounts

KILLER = """#!/bin/bash
kill -KILL -- -"$JPU_TEST_AGENT_PGID" 2>/dev/null   # the supervisor: the agent's whole group
sleep 0.3
exec {real} "$@"
"""

AGENT = """
import os, sys
from jpu.backends.accounts import AccountMap
os.environ["JPU_TEST_AGENT_PGID"] = str(os.getpgrp())
AccountMap().account_for(sys.argv[1])
"""


def test_X4_O5_account_creation_survives_the_agents_group_being_killed(tmp_path: Path) -> None:
    real = shutil.which("useradd", path="/usr/sbin:/usr/bin:/sbin:/bin")
    assert real is not None, "useradd (passwd package) is part of the platform's base"
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "useradd").write_text(KILLER.format(real=real))
    (shim / "useradd").chmod(0o755)
    user = f"x{uuid.uuid4().hex[:10]}"
    name = f"jpu-{user}"
    env = {**os.environ, "PATH": f"{shim}:{os.environ['PATH']}"}
    agent = subprocess.run(
        [sys.executable, "-P", "-c", AGENT, user],
        env=env,
        cwd=tmp_path,
        start_new_session=True,  # like jpu.stack starts each service
        check=False,
    )
    try:
        assert agent.returncode == -9  # the agent's group was killed during its useradd
        deadline = time.monotonic() + 10
        while True:  # the useradd goes on in its own session and completes
            try:
                entry = pwd.getpwnam(name)
                break
            except KeyError:
                assert time.monotonic() < deadline, f"{name} was never created (killed with it)"
                time.sleep(0.05)
        assert entry.pw_uid != 0
        deadline = time.monotonic() + 10
        while Path("/etc/passwd.lock").exists():  # it released its locks: nothing stale
            assert time.monotonic() < deadline, "a stale /etc/passwd.lock was left behind"
            time.sleep(0.05)
    finally:
        subprocess.run(["userdel", name], capture_output=True, check=False)
