"""Jobs (SPEC §8): submit, list, show, events (the audit trail), logs (the output), files (the
attempt's JOB_OUTPUT_DIR), cancel.

Submit and cancel are commands: the gateway checks who is asking and the request's shape, then
intake decides and appends the event (SPEC E4); the verdicts (422 / 503 / 409) are intake's.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final

import msgspec
from fastapi import APIRouter, Header, Path, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse

from jpu import commands
from jpu.backends import jobfiles, joblogs
from jpu.domain import limits
from jpu.domain.states import PENDING, TERMINAL, JobView
from jpu.runtime.edges import Edges
from jpu.store.projections.jobs import new_row
from jpu_services.gateway.config import GatewayConfig
from jpu_services.gateway.deps import CurrentUser, EdgesDep, PoolDep, SettingsDep
from jpu_services.gateway.errors import ApiError, responses, unreachable_dependency
from jpu_services.gateway.personal import personal_reasons
from jpu_services.gateway.ratelimit import RateLimiter, retry_after_header
from jpu_services.gateway.routes import _attempts, _files, _logs
from jpu_services.gateway.routes import _commands as cmd
from jpu_services.gateway.routes._jobview import (
    array_out,
    job_out,
    list_jobs,
    load_array,
    load_visible,
)
from jpu_services.gateway.routes._jobview import (
    from_log as job_from_log,
)
from jpu_services.gateway.routes._queueview import shared_view
from jpu_services.gateway.workdir import job_accounts

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

MAX_IDEMPOTENCY_KEY: Final = limits.MAX_IDEMPOTENCY_KEY
# What the routes of a job answer besides 2xx (the OpenAPI document; 422 and 503 are added to
# every operation by jpu_services.gateway.openapi, and the submit body is jpu.domain.limits').
_PREFIX: Final = "VALIDATION_ERROR: the id given is the start of several jobs (`candidates`)"
_ERRORS: Final = responses(401, 403, 404, 422, s422=_PREFIX)
_SUBMIT_ERRORS: Final = {
    200: {"description": "an Idempotency-Key replay: the job submitted first (Q6)"},
    **responses(
        401,
        409,
        422,
        429,
        503,
        s409="IDEMPOTENCY_CONFLICT (the key was used with another body, Q6)",
        s422="VALIDATION_ERROR naming the field (Q1) / NO_FIT_PLACEMENT (Q2)",
        s503="SERVICE_MAINTENANCE (Q3) / INTAKE_UNAVAILABLE / SERVICE_UNAVAILABLE",
    ),
}
_UNCANCELLABLE: Final = TERMINAL | {"CANCELLING"}
_CANCEL_ERRORS: Final = responses(401, 403, 404, 409, 422, s409="ALREADY_TERMINAL", s422=_PREFIX)


def _limiter(request: Request) -> RateLimiter:
    limiter: RateLimiter = request.app.state.submit_limiter
    return limiter


_MSGSPEC_JSON: Final = msgspec.json.Decoder()


def _json_loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except RecursionError as e:  # 100k nested arrays: json.loads gives up around 1000 deep
        raise cmd.shape_error("body", f"nested deeper than {limits.MAX_JSON_DEPTH} levels") from e
    except ValueError as e:  # not JSON, not UTF-8, an integer of more than 4300 digits
        raise cmd.shape_error("body", f"body is not valid JSON: {e}") from e


async def _json_object(request: Request) -> dict[str, Any]:
    """Shape only: a JSON object of sane size that every store can hold (jpu.domain.limits: no NUL
    or unpaired surrogate, finite numbers, 64-bit integers, bounded nesting), so the command to
    intake can be encoded at all. Field rules (Q1) are intake's, on the same jpu.domain.limits."""
    raw = await cmd.read_body(request, limits.MAX_BODY_BYTES)
    if raw is None:
        raise cmd.shape_error("body", f"request body over {limits.MAX_BODY_BYTES} bytes")
    try:
        # msgspec decodes to the same values as json where it accepts; what it refuses (a lone
        # surrogate, NaN, a BOM ...) goes through json, whose answer and wording stay the rule
        body = _MSGSPEC_JSON.decode(raw or b"null")
    except (msgspec.DecodeError, RecursionError):
        body = _json_loads(raw)
    if not isinstance(body, dict):
        raise cmd.shape_error("body", "body must be a JSON object")
    problems = limits.json_problems(body)
    if problems:
        message, details = limits.error_details(problems)
        raise ApiError(422, "VALIDATION_ERROR", message, details)
    return body


async def _job_body(
    request: Request, pool: Any, settings: Any, row: Any, *, detail: bool = True
) -> dict[str, Any]:
    rank = reason = decided_at = None
    estimate: dict[str, Any] = dict.fromkeys(
        ("estimated_start", "estimate_basis", "estimated_at", "estimate_reason")
    )
    if row["state"] in PENDING:
        view = await shared_view(request).get()  # read after this request's write (see there)
        rank, reason = view.rank_of(row["job_id"])  # D1/D7: the dispatcher's decision
        decided_at = view.decided_at
        estimate = view.estimate_of(row["job_id"], cmd.now(request))  # U4: not a promise
        if row["state"] == "PERSONAL_QUEUE_WAIT":  # the view was read after the row: it may
            rank = None  # already be promoted; show the row's state (Q5, Q7, Q8, Q9)
            reason = await _personal_reason(request, pool, row)
    out = job_out(row, rank, reason, detail=detail)
    out["decided_at"] = decided_at  # when the dispatcher decided that rank and reason
    out.update(estimate)
    return _with_dirs(out, settings, job_accounts(request).name_for(row["user"]))


async def _personal_reason(request: Request, pool: Any, row: Any) -> str | None:
    """D7 in the personal queue: the domain's answer on the gateway's fold (Q5, Q7, Q8, Q9)."""
    found = await personal_reasons(request).reasons(pool, [row["job_id"]])
    return found.get(row["job_id"])


def _with_dirs(out: dict[str, Any], settings: Any, account: str) -> dict[str, Any]:
    """U5: where the (latest) attempt runs or ran — `workdir`, the `chdir` asked for or else
    JOB_OUTPUT_DIR — and `output_dir` (JOB_OUTPUT_DIR, X2: its stdout and stderr are the logs);
    X4: the Unix `account` it runs as (the backend's mapping of its user)."""
    output_dir = str(joblogs.attempt_dir(settings.output_root, out["id"], out["attempt"]))
    dirs = {"workdir": out.get("chdir") or output_dir, "output_dir": output_dir}
    return {**out, **dirs, "account": account}


def _view_columns(view: JobView) -> dict[str, Any]:
    """What the API reads of a row's JobView besides its columns (Q7, Q8, Q9; _jobview)."""
    return {"dependency": view.dependency, "held": view.held, "array_throttle": view.array_throttle}


async def _visible(request: Request, edges: Any, user: Any, job_id: str) -> Any:
    """`load_visible` after this user's own writes through this gateway (read-your-writes); a
    job not found may have been submitted a moment ago through another gateway, answered
    before the projection wrote it: then once more when the projection reached the log's end."""
    await cmd.own_writes(request, edges, user.name)
    try:
        return await load_visible(edges.pool, user, job_id)
    except ApiError as e:
        if e.status != 404 or not await cmd.caught_up(
            edges, await edges.bus.last_seq(), request=request
        ):
            raise
    return await load_visible(edges.pool, user, job_id)


async def _submitted_body(
    request: Request, row: Any, pool: Any, settings: Any, account: str
) -> dict[str, Any]:
    """The job as just submitted: its state, not its rank. SPEC §8 gives rank and pending reason
    on GET /v1/jobs/{id}; a rank here would cost a whole dispatch cycle per submit, and a job no
    cycle has seen yet has no D7 reason but its personal queue's."""
    personal = row["state"] == "PERSONAL_QUEUE_WAIT"
    reason = await _personal_reason(request, pool, row) if personal else None  # D7
    return _with_dirs(job_out(row, None, reason, detail=True), settings, account)


@router.post(
    "",
    status_code=201,
    responses=_SUBMIT_ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": limits.submit_schema()}},
        }
    },
)
async def submit(
    request: Request,
    user: CurrentUser,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=MAX_IDEMPOTENCY_KEY,
            description="the same key from the same user returns the original job (Q6)",
        ),
    ] = None,
) -> JSONResponse:
    """Submit a job (SPEC §2). 201 with the job; 200 when `Idempotency-Key` replays (Q6)."""
    # read here, not as dependencies: each one is a pass of FastAPI's solver per request
    edges: Edges = request.app.state.edges
    settings: GatewayConfig = request.app.state.settings
    wait = _limiter(request).take(user.name)
    if wait > 0:
        raise ApiError(
            429,
            "RATE_LIMITED",
            "too many submissions; slow down",
            {"retry_after_s": round(wait, 3)},
            headers={"Retry-After": retry_after_header(wait)},
        )
    key_problem = limits.idempotency_key_problem(idempotency_key)
    if key_problem:
        raise cmd.shape_error("Idempotency-Key", key_problem)
    body = await _json_object(request)  # forwarded untouched: intake decides (U5, X4a, Q1–Q3)
    reply = await cmd.send(
        edges,
        commands.submit_subject(settings.base.subject_prefix),
        commands.SubmitCommand(
            user=user.name,
            lab=user.lab,
            body=body,
            idempotency_key=idempotency_key,
            max_active_jobs=user.max_active_jobs,
        ),
    )
    warnings = list(reply.warnings)  # U5: e.g. a chdir the job's account cannot write
    status = 200 if reply.replayed else 201
    headers = {"Location": f"/v1/jobs/{reply.job_id}"}
    if body.get("array") is not None:  # Q7: the array, as one body
        made = await cmd.read_back(
            edges, reply.seq, request, lambda: load_array(edges.pool, user, str(reply.job_id))
        )
        lag: dict[str, Any] = {"id": reply.job_id, "state": reply.state, "projection_lag": True}
        answer = array_out(str(reply.job_id), made) if made else lag
        if warnings:
            answer["warnings"] = warnings
        return JSONResponse(answer, status_code=status, headers=headers)
    account = job_accounts(request).name_for(user.name)
    if reply.submitted is not None and reply.job is not None and reply.seq is not None:
        # accepted: intake's own view of the job answers (no projection wait); this user's
        # next read through this gateway waits for the projection to apply it
        cmd.wrote(request, user.name, reply.seq)
        accepted = {**new_row(reply.submitted, reply.job), **_view_columns(reply.job)}
        out = _with_dirs(
            job_out(accepted, None, reply.pending_reason, detail=True), settings, account
        )
        if warnings:  # U5: accepted, but what it writes in its chdir would be lost
            out["warnings"] = warnings
        return JSONResponse(out, status_code=status, headers=headers)
    row = await cmd.read_back(  # a replay (Q6): the job as the projection has it now
        edges, reply.seq, request, lambda: load_visible(edges.pool, user, str(reply.job_id))
    )
    if row is not None:
        out = await _submitted_body(request, row, edges.pool, settings, account)
    else:  # projection lag or database down: what intake told us (the GET will catch up)
        out = {"id": reply.job_id, "state": reply.state, "projection_lag": True}
    if warnings:  # U5: accepted, but what it writes in its chdir would be lost
        out["warnings"] = warnings
    return JSONResponse(out, status_code=status, headers=headers)


@router.get("", responses=responses(401))
async def list_(
    request: Request,
    user: CurrentUser,
    edges: EdgesDep,
    state: Annotated[str | None, Query(description="state or comma-separated states")] = None,
    lab: str | None = None,
    user_: Annotated[str | None, Query(alias="user")] = None,
    since: Annotated[
        float | None,
        Query(allow_inf_nan=False, description="submitted at or after (epoch seconds)"),
    ] = None,
    until: Annotated[
        float | None, Query(allow_inf_nan=False, description="submitted before (epoch seconds)")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[
        str | None, Query(description="`next_cursor` of the previous page (keyset, newest first)")
    ] = None,
) -> dict[str, Any]:
    """Jobs visible to the caller (own; lab_admin: the lab's; admin: all), newest first, a page
    of `limit` at a time (`next_cursor` until the last page). Each with `elapsed_s` (the latest
    attempt's run time) and `gpu_seconds` (held by all its attempts, F5) — `jpu jobs`/`history`."""
    await cmd.own_writes(request, edges, user.name)  # read-your-writes (the submit's answer)
    states = [s.strip().upper() for s in state.split(",") if s.strip()] if state else None
    rows, nxt = await list_jobs(
        edges.pool, user, states=states, lab=lab, owner=user_, limit=limit, cursor=cursor,
        since=since, until=until,
    )  # fmt: skip
    outs = [job_out(r) for r in rows]
    jobs = await _attempts.history_rows(outs, [dict(r) for r in rows], edges, cmd.now(request))
    return {"jobs": jobs, "next_cursor": nxt}


@router.get("/{job_id}", responses=_ERRORS)
async def show(
    request: Request, job_id: str, user: CurrentUser, edges: EdgesDep, settings: SettingsDep
) -> dict[str, Any]:
    """The job: state, attempt, rank and pending reason if queued, placement, reservation,
    usage charged, backend (Slurm) job id, isolation; its run time (`elapsed_s`, live while it
    runs) and each attempt, with one sentence per OOM retry (`oom_explanation`, X8). The id
    of an array (Q7): the array, its tasks and their counts per state. While the database
    does not answer: the job as its events in the log say (`from_log`, SPEC O5)."""
    try:
        await cmd.own_writes(request, edges, user.name)  # read-your-writes (the submit's answer)
        tasks = await load_array(edges.pool, user, job_id)
        if tasks is not None:  # its id whole or a prefix (U8)
            return array_out(str(tasks[0]["array_id"]), tasks)
        row = await _visible(request, edges, user, job_id)
    except Exception as e:
        if unreachable_dependency(e) is None:
            raise
        return await job_from_log(edges.bus, user, job_id, type(e).__name__)
    out = await _job_body(request, edges.pool, settings, row)
    return await _attempts.job_page(out, dict(row), edges, settings, cmd.now(request))


@router.get("/{job_id}/events", responses=_ERRORS)
async def events(
    request: Request, job_id: str, user: CurrentUser, edges: EdgesDep
) -> dict[str, Any]:
    """The job's events from the log, in stream order (the audit trail, SPEC E2). The id of an
    array (Q7): the array's own events (its submit; each task has its own)."""
    await cmd.own_writes(request, edges, user.name)  # read-your-writes (the submit's answer)
    tasks = await load_array(edges.pool, user, job_id)
    if tasks is not None:  # its id whole or a prefix (U8), as GET /v1/jobs/{id}
        job_id = str(tasks[0]["array_id"])
    else:
        job_id = (await _visible(request, edges, user, job_id))["job_id"]  # a prefix: the id
    delivered = await edges.bus.job_events(job_id)
    return {
        "job_id": job_id,
        "events": [{"seq": d.seq, **msgspec.to_builtins(d.event)} for d in delivered],
    }


_LOGS_DOC: Final = (
    "An attempt's stdout or stderr (SPEC §8, U5): raw bytes as text/plain.\n\n"
    "* `attempt`: default the job's latest; `stream`: stdout (default) or stderr.\n"
    "* Byte range by query parameters (no HTTP Range header): `offset` from the start (≥ 0) or "
    "from the end (< 0, like `tail -c`), `limit` bytes at most (default: up to the end as it is "
    "now). Always 200; the headers `Jpu-Log-Start`/`Jpu-Log-End` say which bytes [start, end) "
    "the body holds, `Jpu-Log-Size` the file's size, `Jpu-Log-Ended` whether the attempt ended "
    "(the output is final). Page on with `offset` = `Jpu-Log-End`.\n"
    "* `follow=true`: a chunked stream from `offset` as the job writes, ending when the attempt "
    "ends (after its last byte); an attempt that has not started yet is waited for.\n\n"
    "Visible to the owner, a lab_admin of the job's lab and admins (403 FORBIDDEN otherwise). "
    "404 NOT_FOUND: no such job or attempt, or the attempt has no output (yet). 503 "
    "OUTPUT_UNREADABLE: the gateway may not read the output root."
)


@router.get(
    "/{job_id}/logs",
    description=_LOGS_DOC,
    response_class=StreamingResponse,  # the 200 is text/plain (below), errors the §8 JSON
    responses={
        200: {
            "description": "the bytes asked for (raw, as the job wrote them)",
            "content": {"text/plain": {"schema": {"type": "string", "format": "binary"}}},
            "headers": _logs.HEADERS_DOC,
        },
        **responses(
            401,
            403,
            404,
            422,
            503,
            s422="VALIDATION_ERROR: the id of an array (Q7; `details.tasks` lists its tasks) "
            "or a prefix of several jobs",
            s503="OUTPUT_UNREADABLE (the gateway may not read it)",
        ),
    },
)
async def logs(
    job_id: str,
    user: CurrentUser,
    pool: PoolDep,
    settings: SettingsDep,
    attempt: Annotated[int | None, Query(ge=1, description="default: the latest")] = None,
    stream: Annotated[joblogs.Stream, Query(description="stdout or stderr")] = "stdout",
    offset: Annotated[
        int,
        Query(
            ge=-_logs.MAX_OFFSET,
            le=_logs.MAX_OFFSET,
            description="first byte: ≥ 0 from the start, < 0 from the end",
        ),
    ] = 0,
    limit: Annotated[
        int | None, Query(ge=1, le=_logs.MAX_OFFSET, description="at most this many bytes")
    ] = None,
    follow: Annotated[bool, Query(description="stream until the attempt ends")] = False,
) -> StreamingResponse:
    """An attempt's stdout or stderr: a byte range, or followed while it runs. The id of an
    array (Q7) is a 422 listing its tasks: each task has its own output (`<id>_<index>`)."""
    tasks = await load_array(pool, user, job_id)
    if tasks is not None:
        job_id = str(tasks[0]["array_id"])  # a prefix (U8): the array's id
        raise ApiError(
            422,
            "VALIDATION_ERROR",
            f"job_id: {job_id} is an array of {len(tasks)} tasks; each has its own output: "
            f"ask for a task, e.g. {tasks[0]['job_id']}",
            {"field": "job_id", "array_id": job_id, "tasks": [r["job_id"] for r in tasks]},
        )
    row = await load_visible(pool, user, job_id)
    return await _logs.serve(
        pool,
        settings.output_root,
        row,
        attempt=attempt,
        stream=stream,
        offset=offset,
        limit=limit,
        follow=follow,
    )


_FILES_DOC: Final = (
    "The files of an attempt's JOB_OUTPUT_DIR (SPEC §8, X2): one directory's entries, sorted by "
    "name — `name`, `type` (file, dir, symlink, other), `size` (bytes, files only), `mtime` "
    "(epoch seconds).\n\n"
    "* `attempt`: default the job's latest; `path`: a directory below JOB_OUTPUT_DIR (default: "
    "JOB_OUTPUT_DIR itself); `limit` entries a page, then `cursor` = `next_cursor`.\n"
    "* Download a file with `GET /v1/jobs/{id}/files/{path}`.\n\n"
    "Visible to the owner, a lab_admin of the job's lab and admins (403 FORBIDDEN otherwise), "
    "also during maintenance. 422 VALIDATION_ERROR naming `path`: `..`, an absolute path, NUL, a "
    "symbolic link on the way (never followed), or not a directory of the job. 404 NOT_FOUND: no "
    "such job, attempt or directory. 503 OUTPUT_UNREADABLE: the gateway may not read the output."
)
_PATH_DOC: Final = "relative to JOB_OUTPUT_DIR; no `..`, no symbolic links"
_PATH_SCHEMA: Final = {"pattern": jobfiles.PATH_PATTERN, "maxLength": jobfiles.MAX_PATH}


@router.get(
    "/{job_id}/files",
    description=_FILES_DOC,
    responses=responses(401, 403, 404, 503, s503="OUTPUT_UNREADABLE (the gateway may not read it)"),
)
async def files(
    job_id: str,
    user: CurrentUser,
    pool: PoolDep,
    settings: SettingsDep,
    attempt: Annotated[int | None, Query(ge=1, description="default: the latest")] = None,
    path: Annotated[str, Query(description=_PATH_DOC, json_schema_extra=_PATH_SCHEMA)] = "",
    limit: Annotated[int, Query(ge=1, le=_files.MAX_LIMIT)] = 1000,
    cursor: Annotated[str | None, Query(description="`next_cursor` of the previous page")] = None,
) -> JSONResponse:
    """A directory of the attempt's JOB_OUTPUT_DIR: its entries."""
    row = await load_visible(pool, user, job_id)
    body = await _files.listing(
        settings.output_root, row, attempt=attempt, path=path, cursor=cursor, limit=limit
    )
    return JSONResponse(body)  # plain JSON already: 10,000 entries skip a costly re-encoding


_FILE_DOC: Final = (
    "One file of an attempt's JOB_OUTPUT_DIR (SPEC §8, X2), as `application/octet-stream` "
    "(an attachment). 200 with the whole file, or 206 Partial Content for one `Range: "
    "bytes=start-[last]` or `bytes=-suffix` (`Content-Range`); 416 RANGE_NOT_SATISFIABLE when no "
    "byte of the range exists (`Content-Range: bytes */size`). Several ranges or a malformed one: "
    "the whole file. `If-Range` with the `ETag` or `Last-Modified` it sent: the range only if "
    "the file is unchanged. `Jpu-File-Size` / `Jpu-File-Mtime` say what the file is.\n\n"
    "Visible as the listing (`GET /v1/jobs/{id}/files`); the same 422 naming `path` for `..`, "
    "absolute paths, NUL, symbolic links, and anything not a plain file of the job's account."
)


@router.get(
    "/{job_id}/files/{path:path}",
    description=_FILE_DOC,
    response_class=StreamingResponse,  # the 200/206 are the file's bytes, errors the §8 JSON
    responses={
        200: {
            "description": "the whole file",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
            "headers": _files.HEADERS_DOC,
        },
        206: {
            "description": "the byte range asked for (Content-Range)",
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
            "headers": _files.HEADERS_DOC,
        },
        **responses(
            401,
            403,
            404,
            416,
            503,
            s416="RANGE_NOT_SATISFIABLE (Content-Range: bytes */size)",
            s503="OUTPUT_UNREADABLE (the gateway may not read it)",
        ),
    },
)
async def file(
    job_id: str,
    user: CurrentUser,
    pool: PoolDep,
    settings: SettingsDep,
    path: Annotated[str, Path(description=_PATH_DOC, json_schema_extra=_PATH_SCHEMA)],
    attempt: Annotated[int | None, Query(ge=1, description="default: the latest")] = None,
    range_: Annotated[
        str | None, Header(alias="Range", description="`bytes=start-[last]` or `bytes=-suffix`")
    ] = None,
    if_range: Annotated[
        str | None, Header(alias="If-Range", description="the ETag or Last-Modified sent")
    ] = None,
) -> StreamingResponse:
    """Download one file of the attempt's JOB_OUTPUT_DIR (HTTP Range requests)."""
    row = await load_visible(pool, user, job_id)
    return await _files.download(
        settings.output_root, row, attempt=attempt, path=path, range_=range_, if_range=if_range
    )


@router.post("/{job_id}/cancel", status_code=202, responses=_CANCEL_ERRORS)
async def cancel(
    request: Request, job_id: str, user: CurrentUser, edges: EdgesDep, settings: SettingsDep
) -> JSONResponse:
    """Cancel (SPEC X5): 202 and the job, with `cancel_grace_s` (a running job gets SIGTERM at
    once and SIGKILL that many seconds later); again → 202 (idempotent); ended → 409
    ALREADY_TERMINAL. Allowed in every maintenance state (M1). `{id}`: a unique prefix too.
    An array's id (Q7): the array, and `cancelled`, the tasks this cancel hit (not those
    already ended or cancelling)."""
    # 404 / 403 before bothering intake; a unique prefix was given: the full id from now on
    await cmd.own_writes(request, edges, user.name)  # read-your-writes (the submit's answer)
    tasks = await load_array(edges.pool, user, job_id)  # Q7: every unfinished task
    if tasks is None:
        job_id = (await _visible(request, edges, user, job_id))["job_id"]
    else:
        job_id = str(tasks[0]["array_id"])  # a prefix (U8): the array's id
    reply = await cmd.send(
        edges,
        commands.cancel_subject(settings.base.subject_prefix),
        commands.CancelCommand(job_id=job_id, by=user.name, role=user.role, lab=user.lab),
    )
    grace = {"cancel_grace_s": settings.base.cancel_grace_s}  # X5: SIGTERM, then SIGKILL after
    if tasks is not None:
        now = await cmd.read_back(
            edges, reply.seq, request, lambda: load_array(edges.pool, user, job_id)
        )
        # the tasks this cancel hit: not ended nor already cancelling before it
        hit = [str(t["job_id"]) for t in tasks if t["state"] not in _UNCANCELLABLE]
        body = {**array_out(job_id, now or tasks), **grace, "cancelled": hit}
        return JSONResponse(body, status_code=202)
    row = await cmd.read_back(
        edges, reply.seq, request, lambda: load_visible(edges.pool, user, job_id)
    )
    if row is None:  # the cancel is in the log; the database does not answer right now
        out = {"id": job_id, "state": reply.state, "projection_lag": True, **grace}
        return JSONResponse(out, status_code=202)
    body = await _job_body(request, edges.pool, settings, row)
    return JSONResponse({**body, **grace}, status_code=202)


_HOLD_ERRORS: Final = responses(
    401, 403, 404, 409, s409="NOT_IN_PERSONAL_QUEUE (only a job waiting there, Q9)"
)


async def _hold(
    request: Request, job_id: str, user: Any, edges: Any, settings: Any, *, hold: bool
) -> dict[str, Any]:
    # 404 / 403 before bothering intake; a prefix (U8): the full id from now on
    job_id = (await _visible(request, edges, user, job_id))["job_id"]
    reply = await cmd.send(
        edges,
        commands.hold_subject(settings.base.subject_prefix),
        commands.HoldCommand(job_id=job_id, by=user.name, hold=hold, role=user.role, lab=user.lab),
    )
    row = await cmd.read_back(
        edges, reply.seq, request, lambda: load_visible(edges.pool, user, job_id)
    )
    if row is None:  # in the log; the database does not answer right now
        return {"id": job_id, "state": reply.state, "held": hold, "projection_lag": True}
    return await _job_body(request, edges.pool, settings, row)


@router.post("/{job_id}/hold", responses=_HOLD_ERRORS)
async def hold(
    request: Request, job_id: str, user: CurrentUser, edges: EdgesDep, settings: SettingsDep
) -> dict[str, Any]:
    """Hold a job waiting in the personal queue (SPEC Q9): it stays there, reason `Held`, and
    holds no slot until released. The owner, a lab_admin of its lab or an admin; again → 200."""
    return await _hold(request, job_id, user, edges, settings, hold=True)


@router.post("/{job_id}/release", responses=_HOLD_ERRORS)
async def release(
    request: Request, job_id: str, user: CurrentUser, edges: EdgesDep, settings: SettingsDep
) -> dict[str, Any]:
    """Release a held job (SPEC Q9): promoted as soon as the user has a free slot (Q5)."""
    return await _hold(request, job_id, user, edges, settings, hold=False)
