"""The `workspace-builder` role of the slurm-agent (SPEC X4a): it follows the workspaces' events
and runs the builds they ask for, where the images are needed — the host that runs the jobs
(the local backend: the agent's host; its podman store). The log is the record: the state of a
workspace is the fold of its events (jpu.domain.workspaces); the builder's files under
`<data_dir>/workspaces/<workspace_id>/b<build>/` are its local scratch (the requirements, the
build log, the builder process's pid).

Each build runs in a process of its own (jpu.backends.workspaces: `podman run` + `podman
commit`), never in the agent's event loop, so a build never delays a launch, a cancel or the
gateway. Restart (SPEC O5): a build the log says is BUILDING is resumed from the scratch — a
builder process still alive is waited for; one that died ends FAILED ("the builder died"); one
never started is started. READY is appended only after the image was committed, so a killed build
never leaves a half-made workspace marked READY.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from collections.abc import Coroutine
from pathlib import Path

from jpu.backends.isolation import podman_base
from jpu.backends.workspaces import Workspace as Scratch
from jpu.backends.workspaces import Workspaces
from jpu.bus import Delivered, EventBus
from jpu.domain.workspaces import Workspace, apply, log_tail
from jpu.events import (
    WorkspaceBuildFailed,
    WorkspaceBuilt,
    WorkspaceDeleted,
    WorkspaceEvent,
    new_event_id,
)
from jpu.runtime.clock import Clock

log = logging.getLogger(__name__)
POLL_S = 1.0  # how often a build this agent did not start (a restart) is looked at


def build_key(ws: Workspace) -> tuple[str, str]:
    """The scratch's (user, name) of one build: one directory and one image per build, so a
    rebuild never changes the image a queued job was submitted with."""
    return ws.workspace_id, f"b{ws.build}"


class WorkspaceBuilder:
    def __init__(self, bus: EventBus, spaces: Workspaces, clock: Clock, prefix: str) -> None:
        self.bus, self.spaces, self.clock, self.prefix = bus, spaces, clock, prefix
        self.known: dict[str, Workspace | None] = {}
        self.seen = 0  # the log's last sequence folded (a redelivery is not folded twice)
        self._tasks: set[asyncio.Task[None]] = set()
        self._building: set[tuple[str, str]] = set()

    async def run(self, stop: asyncio.Event, durable: str) -> None:
        subject = f"{self.prefix}.workspace.>"
        async for d in self.bus.replay(filter_subject=subject):
            self._fold(d)
        for ws in self.known.values():
            if ws is not None and ws.state == "BUILDING":
                self._spawn(self._build(ws))
        try:
            await self.bus.consume(durable, self._handle, stop=stop, filter_subject=subject)
        finally:
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _fold(self, d: Delivered) -> Workspace | None:
        e = d.event
        assert isinstance(e, WorkspaceEvent)
        ws = self.known[e.workspace_id] = apply(self.known.get(e.workspace_id), e, d.seq)
        self.seen = d.seq
        return ws

    async def _handle(self, batch: list[Delivered]) -> None:
        for d in batch:
            if d.seq <= self.seen or not isinstance(d.event, WorkspaceEvent):
                continue
            ws = self._fold(d)
            if ws is not None and ws.state == "BUILDING" and ws.last_seq == d.seq:
                self._spawn(self._build(ws))
            elif isinstance(d.event, WorkspaceDeleted):
                self._spawn(self._remove(d.event.workspace_id))

    def _spawn(self, work: Coroutine[None, None, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _build(self, ws: Workspace) -> None:
        key = build_key(ws)
        if key in self._building:
            return
        self._building.add(key)
        try:
            local = await asyncio.to_thread(self.spaces.get, *key)
            if local is None:  # never started: start it now
                child = await asyncio.to_thread(
                    self.spaces.start_build, *key, ws.source, ws.source_kind
                )
                await asyncio.to_thread(child.wait)
            while (local := await asyncio.to_thread(self.spaces.get, *key)) is not None:
                if local.state != "BUILDING":
                    break
                await asyncio.sleep(POLL_S)  # a builder of an earlier agent still at work
            assert local is not None
            outcome: WorkspaceEvent = await asyncio.to_thread(self._outcome, ws, local)
        except Exception as e:  # never BUILDING for ever: the owner learns why
            log.exception("workspace %s build %d failed to run", ws.workspace_id, ws.build)
            outcome = WorkspaceBuildFailed(
                event_id=new_event_id(), ts=self.clock.now(), workspace_id=ws.workspace_id,
                build=ws.build, reason=f"the builder could not run the build: {e}",
            )  # fmt: skip
        try:
            await self.bus.append(outcome)
        finally:
            self._building.discard(key)

    def _outcome(self, ws: Workspace, local: Scratch) -> WorkspaceBuilt | WorkspaceBuildFailed:
        text = log_tail(self.spaces.log(*build_key(ws)))
        eid, now, wid, build = new_event_id(), self.clock.now(), ws.workspace_id, ws.build
        if local.state == "READY":
            return WorkspaceBuilt(
                event_id=eid, ts=now, workspace_id=wid, build=build, image=local.image,
                size=local.size, created_at=local.built_at or now, log=text,
            )  # fmt: skip
        reason = local.reason or "the build failed"
        return WorkspaceBuildFailed(
            event_id=eid, ts=now, workspace_id=wid, build=build, reason=reason, log=text
        )

    async def _remove(self, workspace_id: str) -> None:
        """A deleted workspace's images and scratch go (a job still running keeps its image:
        podman refuses to remove an image a container uses, and that is fine)."""
        await asyncio.to_thread(self._remove_now, workspace_id)

    def _remove_now(self, workspace_id: str) -> None:
        base = podman_base(self.spaces.podman)
        listed = subprocess.run(
            [*base, "images", "--format", "{{.Repository}}:{{.Tag}}",
             "--filter", f"reference=localhost/jpu-ws-{workspace_id.lower()}-*"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        for image in listed.stdout.split():
            subprocess.run([*base, "rmi", "--ignore", image], capture_output=True, check=False)
        shutil.rmtree(Path(self.spaces.root) / workspace_id, ignore_errors=True)
