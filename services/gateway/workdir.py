"""Whose Unix account a user's jobs run as, and may it work in the job's `chdir` (SPEC U5, X4).

At submit the gateway looks at the directories on the way to the `chdir` as it sees them and
asks jpu.policy.workdir what the job's account may do there (the account as the configured
backend maps users: jpu.backends.account_map — `jpu-<user>` when the agent is root, else the
agent's own). It answers only what the mode bits decide on this host: a directory it cannot
see (shared storage mounted only on the nodes), an ACL on the way or an unknown account leaves
the decision to the node, which enters the directory as the account before the script runs and
fails the attempt with a clear line when it cannot (jpu.backends.isolation.ENTER_WORKDIR).
A gateway whose host does not share the nodes' accounts turns the check off with
JPU_GATEWAY_WORKDIR_CHECK=0.

SPEC SEC1 (`roots_problem`): the path, resolved here (symlinks followed), lies under the
site's `workdir_roots` and outside the platform's data directory and the host's own trees.
Always checked (it needs no account); the node checks again as the job's account at launch.
"""

from __future__ import annotations

import os
from pathlib import PurePosixPath

from fastapi import Request

from jpu.backends import account_map
from jpu.backends.accounts import AccountMap
from jpu.policy.workdir import (
    Access,
    DirMode,
    RunAs,
    access,
    not_on_cluster_problem,
    outside_roots_problem,
)
from jpu_services.gateway.config import GatewayConfig

_ACL = "system.posix_acl_access"


class JobAccounts:
    def __init__(self, settings: GatewayConfig) -> None:
        self.enabled = settings.workdir_check
        self._map: AccountMap = account_map(settings.base)
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


def roots_problem(settings: GatewayConfig, field: str, path: str) -> str | None:
    """SEC1 for a path a request names (`chdir`; `-o/-e` directories too): both as written and
    with every symlink followed as this host sees it (a link into /proc is refused here, one
    swapped in later at launch). Blocking (readlink): call it in a thread."""
    base = settings.base
    data_dir = os.path.realpath(base.data_dir)
    try:
        real = os.path.realpath(path)
    except OSError as e:  # a loop, or a link into what even the gateway may not read
        return f"{field}: {path} cannot be resolved (symlinks followed): {e.strerror}"
    for p in (os.path.normpath(path), real):
        problem = outside_roots_problem(field, p, base.workdir_roots, data_dir)
        if problem is not None:
            return problem
    return None


def not_on_cluster(settings: GatewayConfig, chdir: str) -> str | None:
    """U5: `chdir` refused because it does not exist where jobs run (jpu.policy.workdir
    not_on_cluster_problem); None when it exists or this host cannot tell. Blocking (stat)."""
    return not_on_cluster_problem(chdir, _first_missing(chdir), settings.sees_job_storage)


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


def _chain(chdir: str) -> list[DirMode] | None:
    """Each directory from / down to `chdir` as stat sees it here; None if one cannot be seen."""
    path = PurePosixPath(os.path.normpath(chdir))
    out = []
    for p in [*reversed(path.parents), path]:
        try:
            st = os.stat(p)
        except OSError:  # not here (mounted only on the nodes), or hidden from the gateway
            return None
        out.append(DirMode(str(p), st.st_mode, st.st_uid, st.st_gid, _has_acl(p)))
    return out


def _has_acl(path: PurePosixPath) -> bool:
    try:
        return _ACL in os.listxattr(path)
    except OSError:
        return False


def job_accounts(request: Request) -> JobAccounts:
    found: JobAccounts = request.app.state.job_accounts
    return found
