"""SPEC U5, Q1: the `chdir` of a submit — the directory the job runs in. Pure.

Like sbatch's `--chdir` (the CLI sends the directory `jpu submit` runs in): an absolute path,
at most 4096 bytes of UTF-8 (PATH_MAX; the kernel itself takes one byte less), no NUL: Q1 does
not look it up (it names a directory on the nodes, shared storage). What the job's Unix account
(X4) may do there is checked twice:
  * at submit, by intake, from the directories' modes where it can see them (`access`;
    jpu.backends.workdir_check; jpu.domain.submission.chdir_answer): a directory the account
    cannot enter is refused (422 naming `chdir`, the account and the fix), one it cannot write
    is accepted with a warning (a job may only read there; what it writes there would be lost);
  * on the node, as the account, before the script runs (jpu.backends.isolation.ENTER_WORKDIR):
    a directory it cannot enter fails the attempt with a clear line on its stderr.

SPEC U5 in a deployment (`not_on_cluster_problem`): `jpu submit` sends the directory it runs
in, which on a laptop is no directory of the cluster. Where the gateway sees the storage jobs
run in (as the nodes see it: `make run`, and compose/k8s, whose gateway and agent see the same
volumes), a `chdir` missing there is refused at submit (422 naming `chdir`, details.reason
NOT_ON_CLUSTER) — the job would fail on the node only after holding a GPU. The CLI, when the
directory was its implicit default (no --chdir / #SBATCH --chdir), then submits without one
and says so: a job with no `chdir` runs in its own output directory, which the cluster has.
A site whose gateway host does not mount the nodes' storage says so
(JPU_SEES_JOB_STORAGE=0 on intake) and the node decides, as for an ACL.

SPEC SEC1: where a job may run at all (`outside_roots_problem`): the resolved path (symlinks
followed) lies under one of the site's `workdir_roots` and never inside the platform's data
directory or the host's own trees (/proc, /sys, /run, /dev, /etc) — a job's directory is
bind-mounted into its container, so the platform's sockets or the host's processes must never
be one. Checked at submit on intake's view and again at launch as the job's account.
"""

from __future__ import annotations

import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

MAX_CHDIR_BYTES: Final = 4096  # PATH_MAX on Linux
# SEC1: a root ending in "/*" admits only what lies strictly below it (/tmp itself is shared
# by every account and holds the platform's own runtime files)
DEFAULT_ROOTS: Final = ("/home", "/srv", "/data", "/scratch", "/tmp/*")
# SEC1: the host's own trees: never a job's directory, whatever the roots say
NEVER: Final = ("/proc", "/sys", "/run", "/dev", "/etc")


def chdir_problem(value: Any) -> str | None:
    """Why `value` is not a usable `chdir`, or None when it is."""
    if not isinstance(value, str):
        return "must be a string: an absolute directory path"
    if "\0" in value:
        return "must not contain NUL"
    try:
        size = len(value.encode())
    except UnicodeEncodeError:
        return "must be valid UTF-8 text (no unpaired surrogate)"
    if not value.startswith("/"):
        return f"must be an absolute path (starting with /), got {value[:80]!r}"
    if size > MAX_CHDIR_BYTES:
        return f"at most {MAX_CHDIR_BYTES} bytes (PATH_MAX), got {size}"
    return None


# --- U5: does it exist where the cluster runs jobs? -----------------------------------------

NOT_ON_CLUSTER: Final = "not_on_cluster"  # details.reason of the refusal, for the CLI


def not_on_cluster_problem(chdir: str, missing: str | None, sees_job_storage: bool) -> str | None:
    """Why `chdir` is refused because the cluster has no such directory, or None. `missing`:
    the first directory on the way that does not exist where intake looks (None: all
    exist, or it cannot tell — no permission to look); `sees_job_storage`: intake sees
    the storage jobs run in as the nodes do (else the node decides at launch)."""
    if missing is None or not sees_job_storage:
        return None
    gone = "it" if missing.rstrip("/") == chdir.rstrip("/") else missing
    return (
        f"chdir: {chdir} does not exist on the cluster ({gone} is missing where jobs run): a "
        "job started there would fail after holding a GPU. Submit from a directory on the "
        "cluster's storage, give --chdir DIR, or give no chdir: the job then runs in its own "
        "output directory"
    )


# --- can the job's account write it? (checked where the directory can be seen) ----------------


@dataclass(frozen=True, slots=True)
class DirMode:
    """What `stat` says of one directory on the way to a `chdir` (the I/O is the caller's)."""

    path: str
    mode: int  # st_mode
    uid: int
    gid: int
    acl: bool = False  # a POSIX ACL: its entries may grant what the mode bits deny


@dataclass(frozen=True, slots=True)
class RunAs:
    """The Unix account a job runs as (SPEC X4). `uid` None: not created yet (the agent creates
    it at the job's start: it will own nothing and be in no other group)."""

    name: str
    uid: int | None
    gids: frozenset[int]


def _bits(d: DirMode, who: RunAs) -> int:
    """The rwx bits `who` gets on `d` by its mode: owner's, else group's, else others'."""
    if who.uid is not None and who.uid == d.uid:
        return (d.mode >> 6) & 7
    if d.gid in who.gids:
        return (d.mode >> 3) & 7
    return d.mode & 7


class Access(msgspec.Struct, frozen=True, kw_only=True):
    """What the job's account may do in its `chdir`, and the sentence saying so."""

    enter: bool  # False: the job cannot start there (the node fails it: refuse at submit)
    write: bool  # False: it runs, but what it writes there is lost (warn at submit)
    message: str = ""  # with the fix; "" when it may do both


def access(chain: Sequence[DirMode], who: RunAs) -> Access | None:
    """What `who` may do in the last directory of `chain` (each directory from / down to the
    `chdir`), from the mode bits; None when they cannot say (an ACL on the way, or root): the
    node then decides, as the account (U5)."""
    if not chain or who.uid == 0:
        return None
    for i, d in enumerate(chain):
        last = i == len(chain) - 1
        if not stat.S_ISDIR(d.mode):
            return Access(enter=False, write=False, message=f"{d.path} is not a directory")
        if d.acl:
            return None
        bits = _bits(d, who)
        if not bits & 1:  # no search (x): it cannot get in
            return Access(enter=False, write=False, message=_cannot(who, "enter", d, "x"))
        if last and bits & 2 == 0:
            return Access(enter=True, write=False, message=_cannot(who, "write", d, "rwx"))
    return Access(enter=True, write=True)


def _cannot(who: RunAs, what: str, d: DirMode, perms: str) -> str:
    if what == "enter":
        lost = "the job cannot start there"
    else:
        lost = "what the job writes there (checkpoints, results) is lost"
    return (
        f"the job runs as Unix account {who.name}, which cannot {what} {d.path} (mode "
        f"{stat.S_IMODE(d.mode):04o}, owner uid {d.uid}, group gid {d.gid}): {lost}. Submit "
        f"from (or --chdir to) a directory {who.name} can write, or grant it: "
        f"{_grant(who, d, perms)}"
    )


def _grant(who: RunAs, d: DirMode, perms: str) -> str:
    """Advice that works with what every system has, and the ACL way with where its tool
    comes from (`setfacl` is not installed by default: Debian/Ubuntu package `acl`). Entering
    only needs search permission, harmless to give everyone (chmod o+x); writing is given to
    the one account (never a world-writable directory)."""
    acl = f"setfacl -m u:{who.name}:{perms} {d.path} (setfacl: package acl, apt-get install acl)"
    if perms == "x":
        return f"chmod o+x {d.path} (lets every account pass through, not list it), or {acl}"
    return f"{acl}, or as root chown {who.name} {d.path}"


# --- SEC1: under the site's roots, never the platform's or the host's own trees --------------


def _within(path: str, top: str) -> bool:
    top = top.rstrip("/") or "/"
    return path == top or path.startswith(top + "/") or top == "/"


def _admits(root: str, path: str) -> bool:
    if root.endswith("/*"):
        top = root[:-2].rstrip("/") or "/"
        return path != top and _within(path, top)
    return _within(path, root)


def _shown(root: str) -> str:
    return f"subdirectories of {root[:-2]}" if root.endswith("/*") else root


def outside_roots_problem(
    field: str, resolved: str, roots: Sequence[str], data_dir: str
) -> str | None:
    """SPEC SEC1: why a job may not run in (nor get mounted) `resolved` — the absolute path
    with every symlink followed, as the caller resolved it — or None when it may. `field`
    names the request's field (`chdir`, `output`, `error`) in the message; `data_dir` is the
    platform's data directory, resolved too."""
    path = "/" + resolved.strip("/") if resolved.startswith("/") else resolved
    if not path.startswith("/"):
        return f"{field}: must resolve to an absolute path, got {resolved[:80]!r}"
    for top in NEVER:
        if _within(path, top):
            return f"{field}: {path} lies in {top}, the host's own: jobs never run there"
    data = data_dir.rstrip("/") or "/"
    if data != "/" and _within(path, data):
        return f"{field}: {path} lies in the platform's data directory {data}: jobs never run there"
    if any(_admits(r, path) for r in roots):
        return None
    allowed = ", ".join(_shown(r) for r in roots) or "(none configured)"
    return (
        f"{field}: {path} (symlinks followed) is not under the site's workdir_roots; "
        f"allowed: {allowed}"
    )
