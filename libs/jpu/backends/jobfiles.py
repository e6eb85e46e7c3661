"""The files of a job attempt's JOB_OUTPUT_DIR as the API serves them (SPEC §8
`GET /v1/jobs/{id}/files`, X2): list a directory, open one file for a (byte-ranged) download.

Everything below the attempt's directory is the job's account's own, and the gateway may read
as root: a job could plant `results -> /etc/shadow`, a link to another user's output, a FIFO or a
hard link to a file it does not own. So a `path` is split into names and never handed to the
kernel whole: each name is opened relative to the directory fd before it with O_NOFOLLOW (no
symbolic link is ever followed, not even one that stays inside the directory), every directory
and the file must belong to the account that owns the attempt's directory, and the file must be
a regular one (opened O_NONBLOCK so a FIFO cannot hang the request). The attempt's directory is
found exactly as for the logs (jpu.backends.joblogs.open_attempt). `path_problem` and `http_range`
are pure.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from jpu.backends import joblogs

MAX_PATH: Final = 4096  # PATH_MAX, in UTF-8 bytes
MAX_NAME: Final = 255  # NAME_MAX
# path_problem's shape as the API's schema says it (SPEC §8): relative, no `..` name, no NUL. The
# end of text is `(?![\s\S])`, not `$`, which Python also lets match before a final newline.
# The byte limits (MAX_PATH, MAX_NAME in UTF-8) have no JSON Schema form; `maxLength` bounds chars.
PATH_PATTERN: Final = r"^(?!/)(?!(?:[^\u0000]*/)?\.\.(?:/|(?![\s\S])))[^\u0000]*$"
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_FILE: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK

EntryType = Literal["file", "dir", "symlink", "other"]


class PathRefused(ValueError):
    """The path may not be served: unsafe as written, or it leads through something that is not
    a plain directory or file of the job (422 VALIDATION_ERROR naming `path`)."""


class PathMissing(LookupError):
    """Nothing by that name in the attempt's directory (404)."""


class RangeUnsatisfiable(ValueError):
    """A `Range` none of whose bytes exist (416)."""


@dataclass(frozen=True)
class Entry:
    name: str
    type: EntryType
    size: int | None  # bytes, for a file; None for anything else
    mtime: float  # epoch seconds


def path_problem(path: str) -> str | None:
    """Why `path` (relative to JOB_OUTPUT_DIR) is refused, or None. `.` and empty names (`a//b`,
    a trailing `/`) are harmless and skipped; `..` never is."""
    if "\x00" in path:
        return "must not contain NUL"
    try:
        size = len(path.encode())
    except UnicodeEncodeError:
        return "must be valid UTF-8"
    if size > MAX_PATH:
        return f"at most {MAX_PATH} bytes"
    if path.startswith("/"):
        return "must be relative to the attempt's output directory, not absolute"
    for name in path.split("/"):
        if name == "..":
            return "must not contain '..'"
        if len(name.encode()) > MAX_NAME:
            return f"each name at most {MAX_NAME} bytes"
    return None


def names(path: str) -> list[str]:
    """The names of a path `path_problem` accepted: [] is the directory itself."""
    return [n for n in path.split("/") if n not in ("", ".")]


def _refuse_or_missing(name: str, dir_fd: int, e: OSError, shown: str) -> Exception:
    """What an open that failed on `name` means for the client."""
    if isinstance(e, FileNotFoundError):
        return PathMissing(f"no {shown!r} in the attempt's output directory")
    if isinstance(e, PermissionError):
        return joblogs.OutputError(
            f"the gateway cannot read {shown}: {e.strerror}", unreadable=True
        )
    try:
        mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        mode = 0
    if stat.S_ISLNK(mode):
        return PathRefused(f"{shown!r} is a symbolic link; links are never followed")
    if stat.S_ISDIR(mode):
        return PathRefused(f"{shown!r} is a directory: list it with ?path=")
    if stat.S_ISREG(mode):
        return PathRefused(f"{shown!r} is a file, not a directory: download it")
    return PathRefused(f"{shown!r} is not a plain file or directory of the job: {e.strerror}")


def _walk(root: Path, job_id: str, attempt: int, dirs: list[str]) -> tuple[int, int]:
    """An fd of the directory `dirs` below the attempt's, and the job account's uid."""
    opened = joblogs.open_attempt(root, job_id, attempt)
    if opened is None:
        raise PathMissing(f"attempt {attempt} of job {job_id} has no output directory (yet)")
    fd, owner = opened
    try:
        for i, name in enumerate(dirs):
            shown = "/".join(dirs[: i + 1])
            try:
                nxt = os.open(name, _DIR, dir_fd=fd)
            except OSError as e:
                raise _refuse_or_missing(name, fd, e, shown) from e
            os.close(fd)
            fd = nxt
            if os.fstat(fd).st_uid != owner:
                raise PathRefused(f"{shown!r} is not a directory of the job's account")
    except BaseException:
        os.close(fd)
        raise
    return fd, owner


def _entry(dir_fd: int, name: str, owner: int) -> Entry:
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    kind: EntryType = "other"
    if stat.S_ISREG(st.st_mode) and st.st_uid == owner:  # a hard link to another's: "other"
        kind = "file"
    elif stat.S_ISDIR(st.st_mode):
        kind = "dir"
    elif stat.S_ISLNK(st.st_mode):
        kind = "symlink"
    return Entry(
        name=name.encode(errors="surrogateescape").decode(errors="backslashreplace"),
        type=kind,
        size=st.st_size if kind == "file" else None,
        mtime=st.st_mtime,
    )


def list_dir(
    root: Path, job_id: str, attempt: int, path: str, *, after: str | None, limit: int
) -> tuple[list[Entry], bool]:
    """The entries of `path` (sorted by name, those after `after`, at most `limit`) and whether
    more follow. Raises PathRefused, PathMissing, joblogs.OutputError."""
    fd, owner = _walk(root, job_id, attempt, names(path))
    try:
        listed = sorted(os.listdir(fd))
        if after is not None:
            listed = [n for n in listed if n > after]
        out = []
        for name in listed[:limit]:
            with contextlib.suppress(FileNotFoundError):  # removed while we listed
                out.append(_entry(fd, name, owner))
        return out, len(listed) > limit
    finally:
        os.close(fd)


def open_file(root: Path, job_id: str, attempt: int, path: str) -> joblogs.OpenOutput:
    """One regular file of the job's account below the attempt's directory, open for reading.
    Raises PathRefused, PathMissing, joblogs.OutputError."""
    parts = names(path)
    if not parts:
        raise PathRefused("names the output directory itself: list it with GET .../files")
    fd, owner = _walk(root, job_id, attempt, parts[:-1])
    try:
        try:
            file_fd = os.open(parts[-1], _FILE, dir_fd=fd)
        except OSError as e:
            raise _refuse_or_missing(parts[-1], fd, e, "/".join(parts)) from e
    finally:
        os.close(fd)
    st = os.fstat(file_fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != owner:
        os.close(file_fd)
        what = "a directory: list it with ?path=" if stat.S_ISDIR(st.st_mode) else None
        raise PathRefused(f"{'/'.join(parts)!r} is {what or 'not a plain file of the job'}")
    return joblogs.OpenOutput(file_fd, joblogs.attempt_dir(root, job_id, attempt) / path)


_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


def http_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) of a `Range: bytes=…` header (RFC 9110 §14.1.2) on a file of `size` bytes,
    or None: send the whole file — no header, another unit, several ranges or a malformed one
    (a server may ignore those). Raises RangeUnsatisfiable when no byte of it exists."""
    m = _RANGE.match(header or "")
    if m is None or (not m[1] and not m[2]):
        return None
    if not m[1]:  # bytes=-N: the last N bytes
        n = int(m[2])
        if n == 0 or size == 0:
            raise RangeUnsatisfiable(f"the last {n} bytes of {size}")
        return max(size - n, 0), size
    start = int(m[1])
    last = int(m[2]) if m[2] else None
    if last is not None and last < start:
        return None  # invalid: ignored
    if start >= size:
        raise RangeUnsatisfiable(f"byte {start} of {size}")
    return start, size if last is None else min(last + 1, size)
