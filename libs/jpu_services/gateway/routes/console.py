"""The web console (SPEC U2): static files, served at `/` (the page) and `/console/<asset>`.

The page needs no token to load; it asks the user for one and calls the API like any client.
Only the files listed here are served (no directory walking).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Final

from fastapi import APIRouter
from fastapi.responses import FileResponse

from jpu_services.gateway.errors import ApiError

CONSOLE_DIR: Final = Path(__file__).resolve().parent.parent / "console"
# the "why" sentences (SPEC U4), one catalog with `jpu why`'s: jpu/explain/why.json
WHY_CATALOG: Final = Path(str(resources.files("jpu.explain").joinpath("why.json")))
# The page's ES modules (main.js imports the others; no build step). A module script is run only
# when it is served with a JavaScript MIME type.
MODULES: Final = (
    "main.js",
    "core.js",
    "strings.js",
    "time.js",
    "queue.js",
    "pool.js",
    "labs.js",
    "jobs.js",
    "workspaces.js",
    "job.js",
    "log.js",
    "why.js",
    "files.js",
    "submit.js",
)
_ASSETS: Final = {
    "index.html": "text/html; charset=utf-8",
    "why.json": "application/json; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    **dict.fromkeys(MODULES, "text/javascript; charset=utf-8"),
}

router = APIRouter(tags=["console"], include_in_schema=False)


# The page runs only the gateway's own files: its modules, its stylesheet, its API; no inline
# script or style element, no plugin, no other origin (the DOM is built with textContent, and a
# style is set through the CSSOM, which this policy allows).
CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)


def _file(name: str) -> FileResponse:
    if name not in _ASSETS:
        raise ApiError(404, "NOT_FOUND", f"no console file {name!r}")
    path = WHY_CATALOG if name == "why.json" else CONSOLE_DIR / name
    headers = {"Cache-Control": "no-cache"}
    if name == "index.html":
        headers["Content-Security-Policy"] = CSP
    return FileResponse(path, media_type=_ASSETS[name], headers=headers)


@router.get("/")
async def index() -> FileResponse:
    return _file("index.html")


@router.get("/console/{name}")
async def asset(name: str) -> FileResponse:
    return _file(name)
