"""`GET /v1/jobs/{id}/files` (SPEC §8, X2): the files of an attempt's JOB_OUTPUT_DIR — a listing
and a download with HTTP Range requests.

The design (also in the OpenAPI document and docs/outputs.md):
  * `attempt` (default: the job's latest), as for the logs (jpu_services.gateway.routes._logs);
  * `GET …/files?path=DIR` lists a directory (default: JOB_OUTPUT_DIR itself), sorted by name, a
    page of `limit` at a time (`next_cursor`, like the jobs list): name, type, size, mtime;
  * `GET …/files/{path}` downloads one file: 200 with all of it, or 206 Partial Content with one
    `Range: bytes=…` (`Content-Range`; 416 when no byte of it exists; `If-Range` with the ETag or
    Last-Modified sends all of it when the file changed). Always `application/octet-stream` as an
    attachment: the job's bytes never run as a page of the console's origin;
  * refused paths (`..`, absolute, NUL, a symbolic link anywhere on the way, something that is
    not a plain file or directory of the job's account) are 422 VALIDATION_ERROR naming `path`.
The file system side is jpu.backends.jobfiles (safe against what the job's account can plant).
"""

from __future__ import annotations

import asyncio
from email.utils import formatdate
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from fastapi.responses import StreamingResponse

from jpu.backends import jobfiles, joblogs
from jpu_services.gateway.errors import ApiError
from jpu_services.gateway.routes import _logs
from jpu_services.gateway.routes._commands import shape_error

MAX_LIMIT: Final = 10_000  # entries in one page of a listing
READ_CHUNK: Final = 1024 * 1024  # a download reads this much per thread hop (checkpoints: GBs)
HEADERS_DOC: Final[dict[str, Any]] = {
    "Content-Range": {
        "description": "206: `bytes start-last/size`",
        "schema": {"type": "string"},
    },
    "Content-Length": {"description": "bytes in the body", "schema": {"type": "integer"}},
    "Accept-Ranges": {"description": "`bytes`", "schema": {"type": "string"}},
    "Last-Modified": {"description": "the file's modification time", "schema": {"type": "string"}},
    "ETag": {
        "description": "changes when the file does (size, mtime)",
        "schema": {"type": "string"},
    },
    "Jpu-File-Size": {"description": "the file's whole size", "schema": {"type": "integer"}},
    "Jpu-File-Mtime": {"description": "its mtime, epoch seconds", "schema": {"type": "number"}},
    "Jpu-File-Attempt": {"description": "the attempt read", "schema": {"type": "integer"}},
}


def _checked(path: str, details: dict[str, Any]) -> None:
    problem = jobfiles.path_problem(path)
    if problem is not None:
        raise shape_error("path", problem, path=path[:200], **details)


def _refused(e: Exception, path: str, details: dict[str, Any]) -> ApiError:
    if isinstance(e, jobfiles.PathRefused):
        return shape_error("path", str(e), path=path, **details)
    if isinstance(e, jobfiles.PathMissing):
        return ApiError(404, "NOT_FOUND", str(e), {"path": path, **details})
    assert isinstance(e, joblogs.OutputError)
    return _logs.output_error(e, details["job_id"], details["attempt"])


async def listing(
    root: Path, row: Any, *, attempt: int | None, path: str, cursor: str | None, limit: int
) -> dict[str, Any]:
    """The answer for a job row the caller may see (visibility is checked before)."""
    n = _logs.pick_attempt(row, attempt)
    job_id = str(row["job_id"])
    details: dict[str, Any] = {"job_id": job_id, "attempt": n}
    _checked(path, details)
    try:
        entries, more = await asyncio.to_thread(
            jobfiles.list_dir, root, job_id, n, path, after=cursor, limit=limit
        )
    except (jobfiles.PathRefused, jobfiles.PathMissing, joblogs.OutputError) as e:
        raise _refused(e, path, details) from e
    return {
        **details,
        "path": "/".join(jobfiles.names(path)),
        "ended": _logs.attempt_over(row["state"], int(row["attempt"]), n),
        "entries": [
            {"name": e.name, "type": e.type, "size": e.size, "mtime": e.mtime} for e in entries
        ],
        "next_cursor": entries[-1].name if more and entries else None,
    }


def etag(size: int, mtime_ns: int) -> str:
    return f'"{size:x}-{mtime_ns:x}"'


async def download(
    root: Path,
    row: Any,
    *,
    attempt: int | None,
    path: str,
    range_: str | None,
    if_range: str | None,
) -> StreamingResponse:
    """One file, whole (200) or one byte range of it (206); 416 when the range is past its end."""
    n = _logs.pick_attempt(row, attempt)
    job_id = str(row["job_id"])
    details: dict[str, Any] = {"job_id": job_id, "attempt": n}
    _checked(path, details)
    try:
        out = await asyncio.to_thread(jobfiles.open_file, root, job_id, n, path)
    except (jobfiles.PathRefused, jobfiles.PathMissing, joblogs.OutputError) as e:
        raise _refused(e, path, details) from e
    try:
        st = await asyncio.to_thread(out.stat)
        tag, modified = etag(st.st_size, st.st_mtime_ns), formatdate(st.st_mtime, usegmt=True)
        size = st.st_size
        headers = {
            "Accept-Ranges": "bytes",
            "ETag": tag,
            "Last-Modified": modified,
            "Jpu-File-Size": str(size),
            "Jpu-File-Mtime": repr(st.st_mtime),
            "Jpu-File-Attempt": str(n),
            "Content-Disposition": "attachment; filename*=UTF-8''"
            + quote(jobfiles.names(path)[-1], safe=""),
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        }
        span = None
        if if_range is None or if_range.strip() in (tag, modified):  # else: it changed, send all
            try:
                span = jobfiles.http_range(range_, size)
            except jobfiles.RangeUnsatisfiable as e:
                raise ApiError(
                    416,
                    "RANGE_NOT_SATISFIABLE",
                    f"range {range_!r}: {e}; the file has {size} bytes",
                    {**details, "path": path, "size": size},
                    headers={"Content-Range": f"bytes */{size}", "Accept-Ranges": "bytes"},
                ) from e
    except BaseException:
        out.close()
        raise
    start, end = span or (0, size)
    headers["Content-Length"] = str(end - start)
    status = 200
    if span is not None:
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    return StreamingResponse(
        _logs.read_range(out, start, end, READ_CHUNK),
        status_code=status,
        media_type="application/octet-stream",
        headers=headers,
    )
