"""A user's default workspace (SPEC X4a): `GET/PUT /v1/me/workspace`.

Like the notification defaults, the setting is an event on the log, `WorkspaceDefaultChanged` on
the user's own subject for it (`<prefix>.user.<name>.workspace`): the log is the record (E1) and
the current default is the subject's last message. A job that names no workspace runs in it
(jpu.domain.workspaces.with_default, applied by intake on its fold). A PUT names a workspace the
user may use (own, else the lab's; it may still be building) or null to clear it; a name that is
not a workspace name is a 422 naming `workspace`, one the user has no workspace by a 404 naming
it (a missing resource, as the OpenAPI schema says, SPEC §8); neither appends anything.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from jpu.bus import EventBus
from jpu.domain import limits
from jpu.domain.workspaces import default_problem, lookup_ids
from jpu.events import WorkspaceDefaultChanged, decode, new_event_id, subject_for
from jpu.store.projections.workspaces import read_first
from jpu_services.gateway.deps import CurrentUser, EdgesDep
from jpu_services.gateway.errors import ApiError, responses
from jpu_services.gateway.routes import _commands as cmd
from jpu_services.gateway.routes._commands import now

router = APIRouter(prefix="/v1/me", tags=["users"])


class DefaultWorkspaceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    workspace: str | None = Field(
        None, min_length=1, max_length=64, pattern=limits.WORKSPACE_NAME.pattern,
        description="the workspace a job that names none runs in; null clears it",
    )  # fmt: skip


class DefaultWorkspaceOut(BaseModel):
    user: str
    workspace: str | None
    seq: int  # the setting's stream seq; 0: never set


async def current_default(bus: EventBus, user: str) -> tuple[str | None, int]:
    """The user's default workspace (None: none) and the seq of the event that set it."""
    probe = WorkspaceDefaultChanged(event_id="", ts=0.0, user=user)
    msg = await bus.last_message(subject_for(probe, bus.prefix))
    if msg is None:
        return None, 0
    event = decode(msg.data or b"")
    name = event.workspace if isinstance(event, WorkspaceDefaultChanged) else None
    return name, int(msg.seq or 0)


@router.get("/workspace", responses=responses(401))
async def get_default(user: CurrentUser, edges: EdgesDep) -> DefaultWorkspaceOut:
    """Your default workspace (SPEC X4a); null until you set one."""
    name, seq = await current_default(edges.bus, user.name)
    return DefaultWorkspaceOut(user=user.name, workspace=name, seq=seq)


@router.put(
    "/workspace",
    responses=responses(400, 401, 404, 422, s404="NOT_FOUND (no such workspace for you)"),
)
async def put_default(
    request: Request, body: DefaultWorkspaceIn, user: CurrentUser, edges: EdgesDep
) -> DefaultWorkspaceOut:
    """Set your default workspace (a job naming none runs in it), or clear it with null."""
    name = body.workspace
    if name is not None:
        if (why := limits.workspace_name_problem(name)) is not None:
            raise cmd.shape_error("workspace", why)
        ws = await read_first(edges.pool, lookup_ids(name, user.name, user.lab))
        if (why := default_problem(ws, name, user.name, user.lab)) is not None:
            raise ApiError(404, "NOT_FOUND", f"workspace: {why}", {"field": "workspace"})
    event = WorkspaceDefaultChanged(
        event_id=new_event_id(), ts=now(request), user=user.name, workspace=name
    )
    seq = await cmd.append(edges, event)  # by intake (SPEC SEC2)
    return DefaultWorkspaceOut(user=user.name, workspace=name, seq=seq)
