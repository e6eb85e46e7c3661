"""Workspaces (SPEC X4a, §8 `/v1/workspaces`): build, list, show, build log, rebuild, delete.

The gateway checks who asks and the request's shape, then appends the workspace's event on the
workspace's own subject with its expected last sequence (SPEC E2: two concurrent builds of one
workspace cannot both be accepted); who may do what and the lab's quota are decided by
jpu.domain.workspaces. The builds are the slurm-agent's (its workspace-builder role): nothing
here waits for one.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import PlainTextResponse, Response

from jpu.bus import ConcurrencyConflict
from jpu.config import Config
from jpu.domain import limits
from jpu.domain import workspaces as dw
from jpu.events import WorkspaceBuildRequested, WorkspaceDeleted, new_event_id
from jpu.store import auth
from jpu.store.projection import wait_applied
from jpu.store.projections import workspaces as store
from jpu_services.gateway.deps import CurrentUser
from jpu_services.gateway.errors import ApiError, responses
from jpu_services.gateway.routes import _commands as cmd
from jpu_services.gateway.routes.jobs import _json_object

router = APIRouter(prefix="/v1/workspaces", tags=["workspaces"])

_ERRORS: Final = responses(401, 403, 404)
_WRITE_ERRORS: Final = responses(
    401, 403, 404, 409, 422,
    s409="CONFLICT (already building, exists, changed meanwhile) / QUOTA_EXCEEDED naming "
    "the quota (`workspace_max_count`, `workspace_max_bytes`)",
)  # fmt: skip
Scope = Literal["user", "lab"]


def out(ws: dw.Workspace) -> dict[str, Any]:
    """A workspace as the API shows it (the build log on its own route)."""
    return {
        "id": ws.workspace_id, "name": ws.name, "scope": ws.scope, "user": ws.user,
        "lab": ws.lab, "state": ws.state, "reason": ws.reason, "build": ws.build,
        "source_kind": ws.source_kind, "requested_at": ws.requested_at, "image": ws.image,
        "size": ws.size, "created_at": ws.created_at,
    }  # fmt: skip


async def _readable(request: Request, who: auth.Principal, name: str, scope: Scope | None,
                    user: str | None) -> dw.Workspace:  # fmt: skip
    ids = dw.lookup_ids(name, who.name, who.lab, scope, user)
    ws = await store.read_first(request.app.state.edges.pool, ids)
    if ws is None or not dw.can_read(ws, who.name, who.lab, who.role):
        raise ApiError(404, "NOT_FOUND", f"no workspace {name!r}")  # never says whose exists
    return ws


def _quotas(config: Config, lab: str) -> tuple[int, int]:
    """The lab's own quotas (`labs:`), else the site's (0 is a quota: no workspace)."""
    own = next((lc for lc in config.labs if lc.name == lab), None)
    count = own.workspace_max_count if own is not None else None
    size = own.workspace_max_bytes if own is not None else None
    return (
        config.workspace_max_count if count is None else count,
        config.workspace_max_bytes if size is None else size,
    )


async def _append(
    request: Request, event: WorkspaceBuildRequested | WorkspaceDeleted, expected: int
) -> int:
    edges = request.app.state.edges
    try:
        seq: int = await cmd.append(edges, event, expected_last_subject_seq=expected)
    except ConcurrencyConflict as e:
        raise ApiError(409, "CONFLICT", "the workspace changed meanwhile; look again") from e
    await wait_applied(edges.pool, "workspaces", seq, timeout=cmd.READ_YOUR_WRITES_TIMEOUT_S)
    return seq


async def _request_build(
    request: Request, who: auth.Principal, name: str, scope: Scope, source_kind: str,
    source: str, existing: dw.Workspace | None,
) -> dict[str, Any]:  # fmt: skip
    pool = request.app.state.edges.pool
    config: Config = request.app.state.settings.base
    problem = dw.quota_problem(
        await store.read_lab(pool, who.lab),
        existing.workspace_id if existing else None,
        *_quotas(config, who.lab),
    )
    if problem is not None:
        field, message = problem
        raise ApiError(409, "QUOTA_EXCEEDED", f"{field}: {message}", {"field": field})
    event = WorkspaceBuildRequested(
        event_id=new_event_id(), ts=cmd.now(request),
        workspace_id=dw.workspace_id(scope, who.lab, who.name, name),
        build=existing.build + 1 if existing else 1, user=who.name, lab=who.lab, name=name,
        scope=scope, source_kind=source_kind, source=source,  # type: ignore[arg-type]
    )  # fmt: skip
    await _append(request, event, existing.last_seq if existing else 0)
    ws = await store.read(pool, event.workspace_id)
    assert ws is not None
    return out(ws)


_BUILD_SCHEMA: Final = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "maxLength": 64, "description": "[a-z0-9_.-]"},
        "requirements": {"type": "string", "maxLength": dw.MAX_SOURCE_BYTES,
                         "description": "a requirements.txt (give this or `environment`)"},
        "environment": {"type": "string", "maxLength": dw.MAX_SOURCE_BYTES,
                        "description": "a conda-style environment.yml: its pip section and "
                        "plain dependencies become pip requirements"},
        "containerfile": {"type": "string", "maxLength": dw.MAX_SOURCE_BYTES,
                          "description": "a Containerfile: one stage, `FROM` the platform's "
                          "base image (container_image), RUN/ENV/WORKDIR…, no COPY/ADD"},
        "scope": {"type": "string", "enum": ["user", "lab"], "default": "user"},
    },
}  # fmt: skip
_SOURCES: Final = ("requirements", "environment", "containerfile")


@router.post(
    "",
    status_code=202,
    responses=_WRITE_ERRORS,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": _BUILD_SCHEMA}},
        }
    },
)
async def build(request: Request, who: CurrentUser) -> dict[str, Any]:
    """Build a workspace: `{"name", "requirements": "<requirements.txt>"}` or `"environment":
    "<environment.yml>"` (its pip section and plain dependencies) or `"containerfile":
    "<Containerfile>"` (FROM the platform's base image), `"scope": "user" | "lab"`
    (a lab's: lab_admin, admin). 202 BUILDING; the build runs on the agent."""
    body = await _json_object(request)
    unknown = sorted(set(body) - {"name", "scope", *_SOURCES})
    if unknown:
        raise cmd.shape_error(unknown[0], f"unknown field (name, {', '.join(_SOURCES)}, scope)")
    name, scope_ = body.get("name"), body.get("scope") or "user"
    if (why := limits.workspace_name_problem(name)) is not None:
        raise cmd.shape_error("name", why)
    assert isinstance(name, str)
    if scope_ not in ("user", "lab"):
        raise cmd.shape_error("scope", "user or lab")
    scope: Scope = "lab" if scope_ == "lab" else "user"
    if sum(k in body for k in _SOURCES) != 1:
        raise cmd.shape_error("requirements", f"give one of {', '.join(_SOURCES)}")
    if "containerfile" in body:  # X4a: on the configured base image, or refused
        base = request.app.state.settings.base.container_image
        source, kind = body["containerfile"], "containerfile"
        if (why := dw.containerfile_problem(source, base)) is not None:
            raise cmd.shape_error("containerfile", why)
    elif "environment" in body:
        source, why = dw.requirements_from_environment(body["environment"])
        if why is not None:
            raise cmd.shape_error("environment", why)
        kind = "environment"
    else:
        source, kind = body["requirements"], "requirements"
        if (why := dw.requirements_problem(source)) is not None:
            raise cmd.shape_error("requirements", why)
    if not dw.can_manage(scope, who.name, who.lab, who.name, who.lab, who.role):
        raise ApiError(403, "FORBIDDEN", "a lab's workspaces are built by its lab_admins")
    wid = dw.workspace_id(scope, who.lab, who.name, name)
    existing = await store.read(request.app.state.edges.pool, wid)
    if existing is not None:
        raise ApiError(409, "CONFLICT", f"workspace {name!r} exists ({existing.state}): rebuild it")
    return await _request_build(request, who, name, scope, kind, source, None)


@router.get("", responses=responses(401))
async def list_(request: Request, who: CurrentUser) -> dict[str, Any]:
    """Own workspaces and the lab's shared ones (lab_admin: the lab's; admin: all)."""
    pool = request.app.state.edges.pool
    rows = await (store.read_all(pool) if who.is_admin else store.read_lab(pool, who.lab))
    mine = [out(w) for w in rows if dw.can_read(w, who.name, who.lab, who.role)]
    return {"workspaces": mine}


ScopeQ = Annotated[Scope | None, Query(description="user or lab; absent: own, else the lab's")]
UserQ = Annotated[str | None, Query(description="another user's (lab_admin, admin)")]


@router.get("/{name}", responses=_ERRORS)
async def show(
    request: Request, who: CurrentUser, name: str, scope: ScopeQ = None, user: UserQ = None
) -> dict[str, Any]:
    """State (BUILDING, READY, FAILED with its reason), image, size, created_at."""
    return out(await _readable(request, who, name, scope, user))


@router.get(
    "/{name}/log",
    response_class=Response,  # the 200 is text/plain (below), errors the §8 JSON
    responses={
        200: {
            "description": "the build log",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        **_ERRORS,
    },
)
async def build_log(
    request: Request, who: CurrentUser, name: str, scope: ScopeQ = None, user: UserQ = None
) -> PlainTextResponse:
    """The last build's log (its tail): its owner, the lab's admins, admins."""
    ws = await _readable(request, who, name, scope, user)
    if ws.scope == "user" and ws.user != who.name and who.role == "user":
        raise ApiError(403, "FORBIDDEN", "a build log is its owner's")
    return PlainTextResponse(ws.log)


async def _managed(request: Request, who: auth.Principal, name: str, scope: Scope | None,
                   user: str | None) -> dw.Workspace:  # fmt: skip
    ws = await _readable(request, who, name, scope, user)
    if not dw.can_manage(ws.scope, ws.user, ws.lab, who.name, who.lab, who.role):
        raise ApiError(403, "FORBIDDEN", f"workspace {name!r} is not yours to change")
    return ws


@router.post("/{name}/rebuild", status_code=202, responses=_WRITE_ERRORS)
async def rebuild(
    request: Request, who: CurrentUser, name: str, scope: ScopeQ = None, user: UserQ = None
) -> dict[str, Any]:
    """Build again from the same source (a new image; queued jobs keep theirs)."""
    ws = await _managed(request, who, name, scope, user)
    if ws.state == "BUILDING":
        raise ApiError(409, "CONFLICT", f"workspace {name!r} is already building")
    owner = auth.Principal(name=ws.user, lab=ws.lab, role=who.role, max_active_jobs=None)
    return await _request_build(request, owner, name, ws.scope, ws.source_kind, ws.source, ws)


@router.delete("/{name}", responses=_WRITE_ERRORS)
async def delete(
    request: Request, who: CurrentUser, name: str, scope: ScopeQ = None, user: UserQ = None
) -> dict[str, Any]:
    """Delete it (its images go on the agent's host); jobs naming it are refused from now."""
    ws = await _managed(request, who, name, scope, user)
    event = WorkspaceDeleted(
        event_id=new_event_id(), ts=cmd.now(request), workspace_id=ws.workspace_id, by=who.name
    )
    await _append(request, event, ws.last_seq)
    return {"id": ws.workspace_id, "name": ws.name, "deleted": True}
