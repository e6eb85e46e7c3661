"""SPEC U5, Q1: the `chdir` of a submit — the directory the job runs in. Pure.

Like sbatch's `--chdir` (the CLI sends the directory `jpu submit` runs in): an absolute path,
at most 4096 bytes of UTF-8 (PATH_MAX; the kernel itself takes one byte less), no NUL. It is
not looked up here: it names a directory on the nodes (shared storage), which intake cannot
see; the backend enters it as the user when the job starts and fails the attempt with a clear
line on its stderr when it cannot.
"""

from __future__ import annotations

from typing import Any, Final

MAX_CHDIR_BYTES: Final = 4096  # PATH_MAX on Linux


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
