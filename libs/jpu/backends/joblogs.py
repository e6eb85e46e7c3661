"""A job attempt's output as the API serves it (SPEC §8 `GET /v1/jobs/{id}/logs`, U5, X2).

Where it is: `<output_root>/<job_id>/<attempt>/stdout` and `…/stderr` — JOB_OUTPUT_DIR of the
attempt (the backends create it, 0700, owned by the job's account; Slurm writes there through
`--output`/`--error`). `output_root` is the agent's (`JPU_AGENT_OUTPUT_ROOT`, else the
`output_root` key, else `<data_dir>/outputs`; `make run` as root sets JPU_AGENT_OUTPUT_ROOT
outside its 0700 data dir, SPEC SEC1, jpu.stack.private); on a real cluster it is a directory on
shared storage that the gateway's host mounts at the same path.

Reading it safely: the gateway may run as root, and everything below `<output_root>/<job_id>/` is
the job's account's own (it could plant `stdout -> /etc/shadow`, or a FIFO). So every name under
the root is opened relative to a directory fd with O_NOFOLLOW, the file must be a regular file
owned by the account that owns the attempt's directory (a hard link to someone else's file is
refused), and O_NONBLOCK keeps a planted FIFO from hanging the request. Pure apart from the
file system; the byte range arithmetic (`byte_range`) is pure.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from jpu.backends.base import SAFE_ID  # the ids the backends accept

if TYPE_CHECKING:
    from jpu.config import Config

Stream = Literal["stdout", "stderr"]
STREAMS: Final[tuple[Stream, ...]] = ("stdout", "stderr")  # the file names in JOB_OUTPUT_DIR
CHUNK: Final = 64 * 1024
_DIR: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


class OutputError(Exception):
    """The attempt's output exists but cannot be served; `unreadable`: the gateway lacks the
    permission (a deployment problem), else the file is not a plain file of the job's account."""

    def __init__(self, message: str, *, unreadable: bool = False) -> None:
        super().__init__(message)
        self.unreadable = unreadable


SITE_DIR: Final = Path("/var/lib/jpu-share")


def site_path(data_dir: Path, kind: str, site_dir: Path = SITE_DIR) -> Path:
    """`<site_dir>/<kind>-<digest of the data dir's absolute path>`: what root's platform keeps
    outside its 0700 data dir (SPEC SEC1), the same for every service and every restart."""
    digest = hashlib.sha1(str(Path(data_dir).absolute()).encode()).hexdigest()[:10]
    return site_dir / f"{kind}-{digest}"


def output_root(config: Config, env: Mapping[str, str] | None = None) -> Path:
    """The root of every JOB_OUTPUT_DIR, as every service computes it (absolute): the agent's
    JPU_AGENT_OUTPUT_ROOT, else the `output_root` key, else — as root, whose data dir job
    accounts cannot enter (SEC1, jpu.stack.private) — `site_path(data_dir, "outputs")`, else
    `<data_dir>/outputs`. One rule, so a gateway started on its own finds what the agents wrote."""
    env = os.environ if env is None else env
    raw = env.get("JPU_AGENT_OUTPUT_ROOT") or config.output_root or ""
    if raw:
        return Path(raw).absolute()
    data_dir = Path(config.data_dir).absolute()
    return site_path(data_dir, "outputs") if os.geteuid() == 0 else data_dir / "outputs"


def attempt_dir(root: Path, job_id: str, attempt: int) -> Path:
    """JOB_OUTPUT_DIR: one directory per job and attempt (SPEC X2)."""
    return root / job_id / str(attempt)


def byte_range(size: int, offset: int, limit: int | None) -> tuple[int, int]:
    """[start, end) of a file of `size` bytes: `offset` ≥ 0 from the start, < 0 from the end
    (like `tail -c`); `limit` bytes at most (None: up to the end). An offset past the end gives
    an empty range at that offset."""
    start = offset if offset >= 0 else max(size + offset, 0)
    end = size if limit is None else min(size, start + limit)
    return start, max(start, end)


@dataclass
class OpenOutput:
    """One open file of an attempt (stdout, stderr, or any, jpu.backends.jobfiles); close it (or use
    `with`)."""

    fd: int
    path: Path

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def stat(self) -> os.stat_result:
        return os.fstat(self.fd)

    def read(self, start: int, end: int, chunk: int = CHUNK) -> bytes:
        """Up to `chunk` bytes from `start`, never past `end` (b"" at the end of the file)."""
        n = min(chunk, end - start)
        return os.pread(self.fd, n, start) if n > 0 else b""

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __del__(self) -> None:  # a response that was never sent still gives its fd back
        self.close()

    def __enter__(self) -> OpenOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_attempt(root: Path, job_id: str, attempt: int) -> tuple[int, int] | None:
    """The attempt's directory as an open fd and the uid that owns it (the job's account), or
    None when it does not exist (yet). `<job_id>/<attempt>` are opened with O_NOFOLLOW (below the
    root everything is the job's). Raises OutputError; the caller closes the fd."""
    if not SAFE_ID.match(job_id) or attempt < 1:
        return None
    fds: list[int] = []
    try:
        fds.append(os.open(root, os.O_RDONLY | os.O_DIRECTORY))  # the operator's: may be a link
        for name in (job_id, str(attempt)):
            fds.append(os.open(name, _DIR, dir_fd=fds[-1]))
        dir_fd = fds.pop()  # kept open: the caller's
    except FileNotFoundError:
        return None
    except PermissionError as e:
        path = attempt_dir(root, job_id, attempt)
        raise OutputError(f"the gateway cannot read {path}: {e.strerror}", unreadable=True) from e
    except OSError as e:  # ELOOP / ENOTDIR: a symlink or a file where a directory belongs
        path = attempt_dir(root, job_id, attempt)
        raise OutputError(f"{path} is not a plain directory of the job: {e.strerror}") from e
    finally:
        for d in fds:
            os.close(d)
    return dir_fd, os.fstat(dir_fd).st_uid


def open_output(root: Path, job_id: str, attempt: int, stream: Stream) -> OpenOutput | None:
    """The attempt's `stream` file, or None when there is none (yet): the attempt never started,
    or its directory was never made. Raises OutputError when it cannot be served."""
    if stream not in STREAMS:
        return None
    opened = open_attempt(root, job_id, attempt)
    if opened is None:
        return None
    dir_fd, owner = opened
    path = attempt_dir(root, job_id, attempt) / stream
    try:
        fd = os.open(stream, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except PermissionError as e:
        raise OutputError(f"the gateway cannot read {path}: {e.strerror}", unreadable=True) from e
    except OSError as e:  # ELOOP: a symlink
        raise OutputError(f"{path} is not a plain file of the job: {e.strerror}") from e
    finally:
        os.close(dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != owner:
        os.close(fd)
        raise OutputError(f"{path} is not a plain file of the job")
    return OpenOutput(fd, path)
