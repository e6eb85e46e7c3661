"""Which Unix account a job runs as (SPEC X2, X4).

An agent running as root never runs a job as root: each platform user maps to an unprivileged
account (`jpu-<user>` by default, created with `useradd --system` when missing), falling back to
`nobody`. An agent that is not root runs jobs as itself (it cannot change UID).
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import subprocess
import threading
from dataclasses import dataclass

from jpu.backends.base import BackendError
from jpu.policy.workdir import RunAs

log = logging.getLogger(__name__)

_UNIX_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True, slots=True)
class Account:
    name: str
    uid: int
    gid: int
    home: str

    @property
    def is_root(self) -> bool:
        return self.uid == 0


def current_account() -> Account:
    entry = pwd.getpwuid(os.getuid())
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _lookup(name: str) -> Account | None:
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        return None
    return Account(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


def _create(name: str) -> Account | None:
    cmd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name]
    try:
        # its own session: when the agent dies, its supervisor kills the agent's process group
        # (jpu.stack, like systemd's KillMode=control-group would) — a useradd killed while it
        # rewrites /etc/passwd, /etc/group and their shadows loses or misnumbers accounts (the
        # crash-safety run: `setpriv: uid 971 not found`, a job FAILED before its first line)
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=30, check=False, start_new_session=True
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("useradd %s failed: %s", name, e)
        return None
    if done.returncode not in (0, 9):  # 9: the name exists (created concurrently)
        log.warning("useradd %s failed (%d): %s", name, done.returncode, done.stderr.strip())
    return _lookup(name)


class AccountMap:
    """Platform user → Unix account, cached. `template` like "jpu-{user}"."""

    def __init__(
        self, template: str = "jpu-{user}", create: bool = True, fallback: str = "nobody"
    ) -> None:
        self.template = template
        self.create = create
        self.fallback = fallback
        self._agent = current_account()
        self._cache: dict[str, Account] = {}
        self._lock = threading.Lock()  # launches prepare in threads: one useradd at a time

    def account_for(self, user: str) -> Account:
        if not self._agent.is_root:
            return self._agent
        with self._lock:
            if user not in self._cache:
                self._cache[user] = self._resolve(user)
            return self._cache[user]

    def expected(self, user: str) -> RunAs:
        """The account `user`'s jobs will run as, as `account_for` would give it, without
        creating it (a missing one the agent creates has no uid yet, and no other group)."""
        if not self._agent.is_root:
            return _run_as(self._agent)
        name = self.template.format(user=user.lower())
        found = _lookup(name) if _UNIX_NAME.match(name) else None
        if found is not None and not found.is_root:
            return _run_as(found)
        if found is None and self.create and _UNIX_NAME.match(name):
            return RunAs(name, None, frozenset())
        fallback = _lookup(self.fallback)
        return _run_as(fallback) if fallback else RunAs(self.fallback, None, frozenset())

    def _resolve(self, user: str) -> Account:
        name = self.template.format(user=user.lower())
        found = None
        if _UNIX_NAME.match(name):
            found = _lookup(name) or (_create(name) if self.create else None)
        if found is None or found.is_root:
            found = _lookup(self.fallback)
            log.warning("user %s runs as fallback account %s", user, self.fallback)
        if found is None or found.is_root:
            raise BackendError(f"no unprivileged account for user {user!r}")
        return found


def _run_as(account: Account) -> RunAs:
    try:
        gids = frozenset(os.getgrouplist(account.name, account.gid))
    except OSError:
        gids = frozenset({account.gid})
    return RunAs(account.name, account.uid, gids)
