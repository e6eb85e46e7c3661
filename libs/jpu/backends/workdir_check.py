"""Whose Unix account a user's jobs run as, and what it may do in the job's `chdir` as this host
sees it (SPEC U5, X4, SEC1): the I/O (stat, listxattr, realpath, passwd) for intake's submit
decision and the gateway's `account` field. What to answer is decided in
jpu.domain.submission.chdir_answer from these facts; the rules are jpu.policy.workdir's.

The account is the configured backend's mapping of the user (jpu.backends.account_map:
`jpu-<user>` when the agent is root, else the agent's own). The mode bits decide only what they
can on this host: a directory it cannot see (shared storage mounted only on the nodes), an ACL
on the way or an unknown account leaves the decision to the node, which enters the directory as
the account before the script runs and fails the attempt with a clear line when it cannot
(jpu.backends.isolation.ENTER_WORKDIR). A host that does not share the nodes' accounts turns
the account check off (JPU_WORKDIR_CHECK=0); SEC1's roots are checked whatever the setting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import PurePosixPath

from jpu.backends import account_map
from jpu.backends.accounts import AccountMap
from jpu.config import Config
from jpu.policy.workdir import (
    Access,
    DirMode,
    RunAs,
    access,
    not_on_cluster_problem,
    outside_roots_problem,
)

_ACL = "system.posix_acl_access"
_OFF = {"0", "false", "no"}


def check_enabled(env: Mapping[str, str] | None = None) -> bool:
    """JPU_WORKDIR_CHECK (JPU_GATEWAY_WORKDIR_CHECK, its former name, still read): 0 turns off
    the account check where this host does not share the nodes' accounts."""
    env = os.environ if env is None else env
    flag = env.get("JPU_WORKDIR_CHECK", env.get("JPU_GATEWAY_WORKDIR_CHECK", "1"))
    return flag.strip().lower() not in _OFF


def sees_job_storage(env: Mapping[str, str] | None = None) -> bool:
    """JPU_SEES_JOB_STORAGE: 0 where this host does not see the storage jobs run in as the
    nodes do; a `chdir` missing here is then not refused at submit (the node decides at
    launch)."""
    env = os.environ if env is None else env
    flag = env.get("JPU_SEES_JOB_STORAGE", "1")
    return flag.strip().lower() not in _OFF


class JobAccounts:
    def __init__(self, config: Config, enabled: bool = True, sees_storage: bool = True) -> None:
        self.enabled, self.sees_storage = enabled, sees_storage
        self._map: AccountMap = account_map(config)
        self._names: dict[str, str] = {}

    def run_as(self, user: str) -> RunAs:
        return self._map.expected(user)

    def name_for(self, user: str) -> str:
        """The account's name, for `GET /v1/jobs/{id}` and `jpu show` (kept: names stay)."""
        if user not in self._names:
            self._names[user] = self.run_as(user).name
        return self._names[user]

    def check(self, user: str, chdir: str) -> tuple[RunAs, Access | None]:
        """The account and what it may do in `chdir` (None: not decided here). Blocking
        (stat, passwd): call it in a thread."""
        who = self.run_as(user)
        if not self.enabled:
            return who, None
        chain = _chain(chdir)
        return who, access(chain, who) if chain is not None else None


def roots_problem(config: Config, field: str, path: str) -> str | None:
    """SEC1 for a path a request names (`chdir`): both as written and with every symlink
    followed as this host sees it (a link into /proc is refused here, one swapped in later at
    launch). Blocking (readlink): call it in a thread."""
    data_dir = os.path.realpath(config.data_dir)
    try:
        real = os.path.realpath(path)
    except OSError as e:  # a loop, or a link into what even this process may not read
        return f"{field}: {path} cannot be resolved (symlinks followed): {e.strerror}"
    for p in (os.path.normpath(path), real):
        problem = outside_roots_problem(field, p, config.workdir_roots, data_dir)
        if problem is not None:
            return problem
    return None


def _chain(chdir: str) -> list[DirMode] | None:
    """Each directory from / down to `chdir` as stat sees it here; None if one cannot be seen."""
    path = PurePosixPath(os.path.normpath(chdir))
    out = []
    for p in [*reversed(path.parents), path]:
        try:
            st = os.stat(p)
        except OSError:  # not here (mounted only on the nodes), or hidden from this process
            return None
        out.append(DirMode(str(p), st.st_mode, st.st_uid, st.st_gid, _has_acl(p)))
    return out


def _has_acl(path: PurePosixPath) -> bool:
    try:
        return _ACL in os.listxattr(path)
    except OSError:
        return False


def _first_missing(chdir: str) -> str | None:
    """The first directory from / down to `chdir` that does not exist here; None when each
    does, or when one cannot be looked into (no permission: the node decides)."""
    path = PurePosixPath(os.path.normpath(chdir))
    for p in [*reversed(path.parents), path]:
        try:
            os.stat(p)
        except (FileNotFoundError, NotADirectoryError):
            return str(p)
        except OSError:
            return None
    return None


def chdir_facts(
    config: Config, accounts: JobAccounts, user: str, chdir: str
) -> tuple[str | None, str | None, str, Access | None]:
    """What jpu.domain.submission.chdir_answer decides on: a `chdir` the cluster has not
    (jpu.policy.workdir.not_on_cluster_problem: a laptop's folder, before a GPU is held), SEC1's
    `roots_problem`, the job's account and what it may do in `chdir` (not looked at once one
    of those refuses). Blocking: call it in a thread."""
    unseen = not_on_cluster_problem(chdir, _first_missing(chdir), accounts.sees_storage)
    if unseen is not None:
        return unseen, None, "", None
    outside = roots_problem(config, "chdir", chdir)
    if outside is not None:
        return None, outside, "", None
    who, can = accounts.check(user, chdir)
    return None, None, who.name, can
