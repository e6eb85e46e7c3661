"""Workspaces (SPEC X4a): one row per workspace that exists, its state folded from its events by
jpu.domain.workspaces (the one fold; the builder and the gateway read the same state). A deleted
workspace has no row."""

from __future__ import annotations

from typing import Any, Final

import asyncpg

from jpu.bus.model import Delivered
from jpu.domain.workspaces import Workspace, apply
from jpu.events import WorkspaceEvent

# fmt: off
COLUMNS: Final = (
    "workspace_id", "scope", "user", "lab", "name", "state", "build", "source_kind", "source",
    "requested_at", "reason", "image", "size", "created_at", "log", "last_seq",
)
# fmt: on
_QUOTED: Final = [f'"{c}"' for c in COLUMNS]
_SELECT: Final = f"SELECT {', '.join(_QUOTED)} FROM workspaces"
_UPSERT: Final = (
    f"INSERT INTO workspaces ({', '.join(_QUOTED)}) "
    f"VALUES ({', '.join(f'${i + 1}' for i in range(len(COLUMNS)))}) "
    "ON CONFLICT (workspace_id) DO UPDATE SET "
    + ", ".join(f"{q} = EXCLUDED.{q}" for q in _QUOTED[1:])
)


def from_row(row: Any) -> Workspace:
    return Workspace(**{c: row[c] for c in COLUMNS})


async def read(conn: asyncpg.Connection | asyncpg.Pool, workspace_id: str) -> Workspace | None:
    row = await conn.fetchrow(f"{_SELECT} WHERE workspace_id = $1", workspace_id)
    return from_row(row) if row is not None else None


async def read_first(conn: asyncpg.Connection | asyncpg.Pool, ids: list[str]) -> Workspace | None:
    """The first of `ids` that exists (jpu.domain.workspaces.lookup_ids's order)."""
    for wid in ids:
        if (ws := await read(conn, wid)) is not None:
            return ws
    return None


async def read_lab(conn: asyncpg.Connection | asyncpg.Pool, lab: str) -> list[Workspace]:
    """Every workspace of a lab's members and the lab's own (what its quota counts)."""
    rows = await conn.fetch(f"{_SELECT} WHERE lab = $1 ORDER BY name, scope", lab)
    return [from_row(r) for r in rows]


async def read_all(conn: asyncpg.Connection | asyncpg.Pool) -> list[Workspace]:
    return [from_row(r) for r in await conn.fetch(f"{_SELECT} ORDER BY lab, name, scope")]


class WorkspacesProjection:
    name = "workspaces"
    tables: tuple[str, ...] = ("workspaces",)

    async def apply(self, conn: asyncpg.Connection, d: Delivered) -> None:
        await self.apply_many(conn, [d])

    async def apply_many(self, conn: asyncpg.Connection, batch: list[Delivered]) -> None:
        """Fold the batch per workspace in memory; one write per workspace it touched."""
        mine = [d for d in batch if isinstance(d.event, WorkspaceEvent)]
        folded: dict[str, Workspace | None] = {}
        for d in mine:
            e = d.event
            assert isinstance(e, WorkspaceEvent)
            wid = e.workspace_id
            if wid not in folded:
                folded[wid] = await read(conn, wid)
            folded[wid] = apply(folded[wid], e, d.seq)
        for wid, ws in folded.items():
            if ws is None:
                await conn.execute("DELETE FROM workspaces WHERE workspace_id = $1", wid)
            else:
                await conn.execute(_UPSERT, *(getattr(ws, c) for c in COLUMNS))


projection = WorkspacesProjection()
