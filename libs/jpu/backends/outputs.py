"""JOB_OUTPUT_DIR and the files in it, made by a root agent inside directories a user owns
(SPEC X2: per job and attempt, owned by the user, not readable by others).

The job's account owns `<root>/<job_id>/`, so it could plant symlinks there (say
`<job_id>/2 -> /etc`) for a later attempt, or another of its jobs could race us. Everything is
therefore done relative to directory file descriptors opened with O_NOFOLLOW, and files are
unlinked and created afresh (O_EXCL): root never follows a name the user controls.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from jpu.backends.accounts import Account
from jpu.backends.base import BackendError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _traversable(path: Path, account: Account) -> bool:
    st = path.stat()
    if st.st_uid == account.uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == account.gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _hand_over(fd: int, account: Account) -> None:
    if account.uid != os.getuid():
        os.fchown(fd, account.uid, account.gid)
    os.fchmod(fd, 0o700)


def open_output_dir(path: Path, account: Account, *, levels: int = 2) -> int:
    """Create `path` and its `levels - 1` parents as the account's (mode 0700); return an fd
    of `path`. Every ancestor above them must let the account through, else the job could not
    reach its own directory: that is refused with the ancestor's name."""
    owned = [path, *list(path.parents)[: levels - 1]][::-1]
    top = owned[0].parent
    top.mkdir(parents=True, exist_ok=True)  # the root-owned region (e.g. <data_dir>/outputs)
    for ancestor in [top, *top.parents]:
        if not _traversable(ancestor, account):
            raise BackendError(f"{ancestor} is not traversable by {account.name}")
    fd = os.open(top, _DIR)
    try:
        for directory in owned:
            with contextlib.suppress(FileExistsError):
                os.mkdir(directory.name, 0o700, dir_fd=fd)
            try:
                child = os.open(directory.name, _DIR, dir_fd=fd)
            except OSError as e:  # ELOOP / ENOTDIR: a symlink or a file was planted there
                raise BackendError(f"{directory} is not a plain directory: {e}") from e
            os.close(fd)
            fd = child
            _hand_over(fd, account)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_private(dir_fd: int, name: str, account: Account, content: bytes = b"") -> int:
    """A fresh file only the account can read; returns its fd open for appending."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(name, dir_fd=dir_fd)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    try:
        os.write(fd, content)
        if account.uid != os.getuid():
            os.fchown(fd, account.uid, account.gid)
        os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_tail(path: Path, limit: int) -> str:
    """The last `limit` bytes of a regular file; never follows a symlink, never blocks on a
    FIFO the job may have put in place of its output."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        f.seek(max(st.st_size - limit, 0))
        return f.read(limit).decode("utf-8", "replace")
