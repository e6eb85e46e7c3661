"""`GET /v1/jobs/{id}/logs` (SPEC §8, U5): an attempt's stdout or stderr, a byte range of it, or
a stream of it that follows the attempt until it ends.

The design (also in the OpenAPI document and docs/outputs.md):
  * `attempt` (default: the job's latest), `stream` = stdout | stderr (default stdout);
  * the byte range is two query parameters, not an HTTP Range header: `offset` (≥ 0 from the
    start; < 0 from the end, like `tail -c`) and `limit` (at most that many bytes; none: up to
    the end as it is now). The answer is always 200 with the raw bytes as `text/plain`, and says
    what it holds in headers: `Jpu-Log-Start` / `Jpu-Log-End` (the bytes [start, end) of the
    file), `Jpu-Log-Size` (the file's size when read) and `Jpu-Log-Ended` (true: the attempt
    ended, nothing will be added). A client pages on with `offset = Jpu-Log-End`;
  * `follow=true` streams (chunked) from `offset` as the job writes, and ends when the attempt
    ends — after the last byte it wrote. Following an attempt that has not started yet waits for
    it; with `limit` the stream also ends after that many bytes.
  * 404 NOT_FOUND: an attempt the job does not have, or one with no output (yet, or ever); 503
    OUTPUT_UNREADABLE: the gateway's account may not read the output root (docs/outputs.md).
The files are read by jpu.backends.joblogs (safe against what the job's account can plant in its
dir).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import asyncpg
from fastapi.responses import StreamingResponse

from jpu.backends import joblogs
from jpu.domain.states import TERMINAL  # SPEC S2
from jpu_services.gateway.errors import ApiError

FOLLOW_POLL_S: Final = 0.25  # how often a follow looks for new bytes and for the attempt's end
MEDIA_TYPE: Final = "text/plain; charset=utf-8"
MAX_OFFSET: Final = 2**53  # JSON-safe; far beyond any file
HEADERS_DOC: Final[dict[str, Any]] = {
    "Jpu-Log-Start": {
        "description": "offset of the first byte returned",
        "schema": {"type": "integer"},
    },
    "Jpu-Log-End": {
        "description": "offset after the last byte returned (page on with offset=End); "
        "absent with follow=true",
        "schema": {"type": "integer"},
    },
    "Jpu-Log-Size": {
        "description": "the file's size when it was read; absent with follow=true",
        "schema": {"type": "integer"},
    },
    "Jpu-Log-Ended": {
        "description": "true: the attempt has ended, its output is final",
        "schema": {"type": "boolean"},
    },
    "Jpu-Log-Attempt": {"description": "the attempt read", "schema": {"type": "integer"}},
    "Jpu-Log-Job": {
        "description": "the job's full id (the path may give a unique prefix of it)",
        "schema": {"type": "string"},
    },
    "Jpu-Log-Stream": {"description": "stdout or stderr", "schema": {"type": "string"}},
}


def attempt_over(state: str, latest: int, attempt: int) -> bool:
    """Nothing more will be written for `attempt`: a later attempt exists, or the job ended."""
    return attempt < latest or state in TERMINAL


def pick_attempt(row: Any, attempt: int | None) -> int:
    """The attempt asked for (default: the job's latest); 404 for one the job does not have."""
    latest = int(row["attempt"])
    n = latest if attempt is None else attempt
    if n > latest:
        raise ApiError(
            404,
            "NOT_FOUND",
            f"job {row['job_id']} has no attempt {n} (its latest attempt is {latest})",
            {"job_id": row["job_id"], "attempt": n, "latest_attempt": latest},
        )
    return n


def _no_output(row: Any, attempt: int, stream: str) -> ApiError:
    hint = ""
    if attempt > 1:
        hint = f"; attempt {attempt - 1} has ended: ask for attempt={attempt - 1}"
    return ApiError(
        404,
        "NOT_FOUND",
        f"attempt {attempt} of job {row['job_id']} has no {stream} output yet "
        f"(the job is {row['state']}){hint}",
        {
            "job_id": row["job_id"],
            "attempt": attempt,
            "stream": stream,
            "state": row["state"],
            "latest_attempt": row["attempt"],
        },
    )


async def _open(root: Path, job_id: str, attempt: int, stream: joblogs.Stream) -> Any:
    try:
        return await asyncio.to_thread(joblogs.open_output, root, job_id, attempt, stream)
    except joblogs.OutputError as e:
        raise output_error(e, job_id, attempt) from e


def output_error(e: joblogs.OutputError, job_id: str, attempt: int) -> ApiError:
    """503 OUTPUT_UNREADABLE: the gateway may not read it (a deployment problem); else 404: what
    is there is not the job's plain output."""
    details = {"job_id": job_id, "attempt": attempt}
    if e.unreadable:
        return ApiError(503, "OUTPUT_UNREADABLE", str(e), details)
    return ApiError(404, "NOT_FOUND", str(e), details)


async def serve(
    pool: asyncpg.Pool,
    root: Path,
    row: Any,
    *,
    attempt: int | None,
    stream: joblogs.Stream,
    offset: int,
    limit: int | None,
    follow: bool,
) -> StreamingResponse:
    """The answer for a job row the caller may see (visibility is checked before)."""
    job_id, latest = str(row["job_id"]), int(row["attempt"])
    n = pick_attempt(row, attempt)
    over = attempt_over(row["state"], latest, n)
    out = await _open(root, job_id, n, stream)
    if out is None and (over or not follow):
        raise _no_output(row, n, stream)
    headers = {
        "Jpu-Log-Attempt": str(n),
        "Jpu-Log-Job": job_id,
        "Jpu-Log-Stream": stream,
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    }
    if follow:
        start: int | None = offset if offset >= 0 else None  # < 0: from the end, once it exists
        if out is not None:
            start = joblogs.byte_range(out.size(), offset, None)[0]
        if start is not None:
            headers["Jpu-Log-Start"] = str(start)
        headers["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the chunks back
        body = _follow(pool, root, job_id, n, stream, out, start, offset, limit)
        return StreamingResponse(body, media_type=MEDIA_TYPE, headers=headers)
    assert out is not None
    size = out.size()
    start, end = joblogs.byte_range(size, offset, limit)
    headers |= {
        "Jpu-Log-Start": str(start),
        "Jpu-Log-End": str(end),
        "Jpu-Log-Size": str(size),
        "Jpu-Log-Ended": "true" if over else "false",
    }
    return StreamingResponse(read_range(out, start, end), media_type=MEDIA_TYPE, headers=headers)


async def read_range(
    out: joblogs.OpenOutput, start: int, end: int, size: int = joblogs.CHUNK
) -> AsyncIterator[bytes]:
    """Bytes [start, end) of `out`, `size` at a time, each read off the event loop; closes it."""
    try:
        pos = start
        while pos < end:
            chunk = await asyncio.to_thread(out.read, pos, end, size)
            if not chunk:
                return  # the file shrank under us
            pos += len(chunk)
            yield chunk
    finally:
        out.close()


async def _state(pool: asyncpg.Pool, job_id: str) -> tuple[str, int]:
    row = await pool.fetchrow("SELECT state, attempt FROM jobs WHERE job_id = $1", job_id)
    assert row is not None  # a job row is never deleted
    return str(row["state"]), int(row["attempt"])


async def _follow(
    pool: asyncpg.Pool,
    root: Path,
    job_id: str,
    attempt: int,
    stream: joblogs.Stream,
    out: joblogs.OpenOutput | None,
    start: int | None,
    offset: int,
    limit: int | None,
) -> AsyncIterator[bytes]:
    """The bytes as they are written, until the attempt is over. The end is looked at *before*
    each read: once the attempt is seen over, the read after it has everything it wrote.
    `start` None: `offset` counts from the end of the file once it exists."""
    pos = start
    left = limit
    try:
        while True:
            state, latest = await _state(pool, job_id)
            over = attempt_over(state, latest, attempt)
            if out is None:
                try:
                    out = await asyncio.to_thread(
                        joblogs.open_output, root, job_id, attempt, stream
                    )
                except joblogs.OutputError:
                    return  # the stream has begun: nothing better to say than ending it
            if out is not None:
                size = out.size()
                if pos is None:
                    pos = joblogs.byte_range(size, offset, None)[0]
                elif size < pos:
                    pos = 0  # truncated by the job: start over, like `tail -F`
                while pos < size and left != 0:
                    end = size if left is None else min(size, pos + left)
                    chunk = await asyncio.to_thread(out.read, pos, end)
                    if not chunk:
                        break
                    pos += len(chunk)
                    left = None if left is None else left - len(chunk)
                    yield chunk
            if over or left == 0:
                return
            await asyncio.sleep(FOLLOW_POLL_S)
    finally:
        if out is not None:
            out.close()
