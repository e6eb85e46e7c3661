"""Workspaces (SPEC X4a), decided here and nowhere else: the fold of a workspace's events into
its state, who may read, use, build and delete it, the lab's quotas, and whether a job may name
it. Pure: no I/O, `now` is the events' own time.

A workspace is identified by (scope, owner, name): a user's own, or its lab's (shared read-only
with the lab's members). Its events are on one subject of the log, so a build request is appended
with the subject's expected last sequence: two concurrent requests never both start a build.

    BUILDING --WorkspaceBuilt--> READY
             --WorkspaceBuildFailed--> FAILED     (the reason; the builder died included)
    any --WorkspaceDeleted--> gone;  READY | FAILED --WorkspaceBuildRequested--> BUILDING (rebuild)

An outcome carries the build number it answers: a late outcome of an earlier build never
changes a rebuild's state.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal

import yaml

from jpu.events import (
    Event,
    WorkspaceBuildFailed,
    WorkspaceBuildRequested,
    WorkspaceBuilt,
    WorkspaceDeleted,
    WorkspaceScope,
)

WorkspaceState = Literal["BUILDING", "READY", "FAILED"]
MAX_SOURCE_BYTES: Final = 64 * 1024
LOG_TAIL_BYTES: Final = 32 * 1024  # what an outcome event carries of the build log


def workspace_id(scope: WorkspaceScope, lab: str, user: str, name: str) -> str:
    """One id per (scope, owner, name): a NATS subject token and a part of an image tag."""
    owner = f"lab:{lab}" if scope == "lab" else f"user:{user}"
    return "w" + hashlib.sha256(f"{owner}/{name}".encode()).hexdigest()[:23]


def lookup_ids(
    name: str, user: str, lab: str, scope: WorkspaceScope | None = None, owner: str | None = None
) -> list[str]:
    """Which workspaces `name` means for `user` of `lab`, in order: their own (or `owner`'s),
    then the lab's shared one; `scope` keeps one of the two."""
    ids = [] if scope == "lab" else [workspace_id("user", lab, owner or user, name)]
    return ids + ([] if scope == "user" else [workspace_id("lab", lab, user, name)])


@dataclass(frozen=True)
class Workspace:
    workspace_id: str
    scope: WorkspaceScope
    user: str  # who asked for the last build (the owner of a `user` workspace)
    lab: str
    name: str
    state: WorkspaceState
    build: int
    source_kind: str
    source: str
    requested_at: float
    reason: str | None = None
    image: str | None = None
    size: int | None = None
    created_at: float | None = None  # when the image was made (READY)
    log: str = ""
    last_seq: int = 0  # the subject's last sequence folded (E2: the next append expects it)


def apply(ws: Workspace | None, event: Event, seq: int = 0) -> Workspace | None:
    """One event folded; None: no workspace (never built, or deleted)."""
    if isinstance(event, WorkspaceBuildRequested):
        return Workspace(
            workspace_id=event.workspace_id, scope=event.scope, user=event.user, lab=event.lab,
            name=event.name, state="BUILDING", build=event.build, source_kind=event.source_kind,
            source=event.source, requested_at=event.ts, last_seq=seq,
        )  # fmt: skip
    if ws is None:
        return None
    if isinstance(event, WorkspaceDeleted):
        return None
    if isinstance(event, WorkspaceBuilt) and event.build == ws.build:
        return replace(
            ws, state="READY", reason=None, image=event.image, size=event.size,
            created_at=event.created_at, log=event.log, last_seq=seq,
        )  # fmt: skip
    if isinstance(event, WorkspaceBuildFailed) and event.build == ws.build:
        return replace(ws, state="FAILED", reason=event.reason, log=event.log, last_seq=seq)
    return replace(ws, last_seq=seq)


def fold(events: Iterable[tuple[int, Event]]) -> Workspace | None:
    ws: Workspace | None = None
    for seq, event in events:
        ws = apply(ws, event, seq)
    return ws


# --- who may do what (SPEC X4a, §8) --------------------------------------------------------


def can_read(ws: Workspace, user: str, lab: str, role: str) -> bool:
    """Its owner; a lab's workspace: the lab's members; admins. Another lab's: never."""
    if role == "admin":
        return True
    if ws.scope == "lab":
        return ws.lab == lab
    return ws.user == user or (role == "lab_admin" and ws.lab == lab)


def can_use(ws: Workspace, user: str, lab: str) -> bool:
    """A job runs in its owner's workspace or in its own lab's shared one."""
    return ws.lab == lab if ws.scope == "lab" else ws.user == user


def can_manage(scope: WorkspaceScope, owner_user: str, owner_lab: str, user: str, lab: str,
               role: str) -> bool:  # fmt: skip
    """Build, rebuild, delete: a user its own; a lab's: its lab_admins and admins."""
    if role == "admin":
        return True
    if scope == "lab":
        return role == "lab_admin" and owner_lab == lab
    return owner_user == user


# --- requests -------------------------------------------------------------------------------


def requirements_problem(text: object) -> str | None:
    if not isinstance(text, str) or not text.strip():
        return "a non-empty requirements.txt text"
    if len(text.encode()) > MAX_SOURCE_BYTES:
        return f"over {MAX_SOURCE_BYTES} bytes"
    if "\0" in text:
        return "contains a NUL character"
    return None


# conda-style `environment.yml`: a dependency `name`, `name=1.2` or `name>=1.2` is a pip
# requirement; `pip:` lists are taken as they are. A Python version, a build string
# (`numpy=1.2=py39_0`) or a non-PyPI channel's package cannot be honoured (the base image's
# Python and pip install the workspace): refused, never silently dropped.
_CONDA_DEP: Final = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:(==?|>=|<=|>|<|!=)\s*([^=\s]+))?$"
)
_TOOLS: Final = frozenset({"pip", "setuptools", "wheel"})


def requirements_from_environment(text: object) -> tuple[str, str | None]:
    """(requirements.txt text, None) or ("", why it cannot be honoured)."""
    if (why := requirements_problem(text)) is not None:
        return "", why
    try:
        doc = yaml.safe_load(str(text))
    except yaml.YAMLError as e:
        return "", f"not valid YAML: {e}"
    deps = doc.get("dependencies") if isinstance(doc, dict) else None
    if not isinstance(deps, list) or not deps:
        return "", "needs a non-empty `dependencies` list"
    out: list[str] = []
    for dep in deps:
        if isinstance(dep, dict) and set(dep) == {"pip"} and isinstance(dep["pip"], list):
            out += [str(p) for p in dep["pip"]]
            continue
        m = _CONDA_DEP.match(str(dep).strip()) if isinstance(dep, str) else None
        if m is None:
            return "", f"dependency {dep!r} cannot be installed with pip (conda build string?)"
        pkg, op, version = m.groups()
        if pkg.lower() == "python":
            if version:
                return "", f"{dep!r}: the base image's Python is used; drop the pin"
            continue
        if pkg.lower() in _TOOLS and not version:
            continue
        out.append(pkg + ("" if not op else ("==" if op == "=" else op) + version))
    if not out:
        return "", "no package to install"
    return "\n".join(out) + "\n", None


def quota_problem(
    lab_workspaces: Sequence[Workspace], replacing: str | None, max_count: int | None,
    max_total_bytes: int | None,
) -> tuple[str, str] | None:  # fmt: skip
    """(field, message) when one more workspace of the lab would exceed its quota; `replacing`
    (a rebuild) is not counted twice. Sizes are those of the lab's built images."""
    others = [w for w in lab_workspaces if w.workspace_id != replacing]
    if max_count is not None and len(others) + 1 > max_count:
        return "workspace_max_count", f"the lab has {len(others)} workspaces of {max_count}"
    used = sum(w.size or 0 for w in others)
    if max_total_bytes is not None and used >= max_total_bytes:
        return "workspace_max_bytes", f"the lab's images use {used} of {max_total_bytes} bytes"
    return None


def usable_problem(ws: Workspace | None, name: str, user: str, lab: str) -> str | None:
    """SPEC X4a: a job names a workspace that exists, it may use, and that is READY."""
    if ws is None or not can_use(ws, user, lab):
        return f"no workspace {name!r} for {user}"
    if ws.state != "READY":
        return f"workspace {name!r} is {ws.state}, not READY" + (
            f" ({ws.reason})" if ws.reason else ""
        )
    return None


def with_default(body: dict[str, object], default: str | None) -> dict[str, object]:
    """X4a: a job that names no workspace (absent or null, Q1) runs in its user's default, if
    one is set; a job naming one keeps it."""
    if body.get("workspace") is not None or default is None:
        return body
    return {**body, "workspace": default}


def default_problem(ws: Workspace | None, name: str, user: str, lab: str) -> str | None:
    """X4a: a user's default names a workspace the user may use (it may still be BUILDING: a
    job is checked for READY when it is submitted)."""
    if ws is None or not can_use(ws, user, lab):
        return f"no workspace {name!r} for {user}"
    return None


def log_tail(text: str) -> str:
    data = text.encode(errors="replace")
    if len(data) <= LOG_TAIL_BYTES:
        return text
    return "…\n" + data[-LOG_TAIL_BYTES:].decode(errors="replace")


# A Containerfile source (SPEC X4a): one stage on the platform's configured base image, built
# with the network by the builder. There is no build context (only the file is sent), so COPY and
# ADD cannot work; instruction options (`RUN --mount=…`, `FROM --platform`) could reach past the
# build's sandbox, and a parser directive (`# escape=`) would change how this check reads it.
_INSTRUCTION: Final = re.compile(r"^\s*([A-Za-z]+)(?:\s+(.*))?$", re.DOTALL)
_NO_CONTEXT: Final = frozenset({"COPY", "ADD"})
_DIRECTIVE: Final = re.compile(r"^#\s*(escape|syntax|check)\s*=", re.IGNORECASE)


def containerfile_problem(text: object, base_image: str) -> str | None:
    """Why a Containerfile cannot be built as a workspace, or None. Its first instruction must
    be `FROM <base_image>` (exactly the configured image), the only FROM."""
    if (why := requirements_problem(text)) is not None:
        return why.replace("requirements.txt", "Containerfile")
    lines: list[str] = []
    pending = ""
    for raw in str(text).splitlines():
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            if _DIRECTIVE.match(raw.strip()):
                return "parser directives (# escape=, # syntax=) are not accepted"
            continue
        if raw.rstrip().endswith("\\"):  # a continued line: one instruction with the next
            pending += raw.rstrip()[:-1] + " "
            continue
        lines.append(pending + raw)
        pending = ""
    if pending:
        lines.append(pending)
    instructions = []
    for line in lines:
        m = _INSTRUCTION.match(line)
        if m is None:
            return f"not an instruction: {line.strip()[:80]!r}"
        instructions.append((m.group(1).upper(), (m.group(2) or "").strip()))
    if not instructions or instructions[0][0] != "FROM":
        return f"its first instruction must be `FROM {base_image}`"
    for op, args in instructions:
        if op == "FROM" and args != base_image:
            return f"`FROM {args}`: only the platform's base image {base_image!r}, once"
        if op in _NO_CONTEXT:
            return f"{op} needs a build context, which a workspace has none of: install with RUN"
        if args.startswith("--"):
            return f"{op} {args.split()[0]}: instruction options are not accepted"
    if sum(op == "FROM" for op, _ in instructions) > 1:
        return f"one stage only: a single `FROM {base_image}`"
    return None
