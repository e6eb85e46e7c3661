"""The web console ships in the wheel the images install (issue 34.1, SPEC U2).

`make run` uses an editable install, which serves `libs/jpu_services/gateway/console/` from the
checkout and so hid that the package data left the console out: the images answered 500 on `/`.
This test builds the real wheel, installs it (not editable) into a folder of its own, and serves
every console asset from that installed copy in a process that cannot see the checkout.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from jpu_services.gateway.routes import console

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ("index.html", "console.css", *console.MODULES)
CATALOG = "jpu/explain/why.json"  # the "why" sentences, served at /console/why.json

# Run from an empty folder with -P: neither the cwd nor the checkout is on sys.path, so the only
# `jpu_services` importable is the installed wheel's (first on PYTHONPATH).
_SERVE = """
import asyncio
import sys
import httpx
from fastapi import FastAPI
from jpu_services.gateway.routes import console
target = sys.argv[1]
assert str(console.CONSOLE_DIR).startswith(target), console.CONSOLE_DIR
app = FastAPI()
app.include_router(console.router)

async def serve() -> None:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        for path in ["/"] + [f"/console/{name}" for name in sys.argv[2:]]:
            response = await client.get(path)
            assert response.status_code == 200 and response.content, (path, response.status_code)

asyncio.run(serve())
print("served", len(sys.argv) - 1)
"""


def test_wheel_carries_and_serves_the_console(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(wheels), str(ROOT)],
        check=True, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = wheels.glob("jpu_share-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [a for a in ASSETS if f"jpu_services/gateway/console/{a}" not in names]
    assert not missing, f"console assets missing from the wheel: {missing}"
    assert CATALOG in names, "the why catalog is missing from the wheel"

    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
         str(wheel)],
        check=True, cwd=tmp_path,
    )  # fmt: skip
    empty = tmp_path / "cwd"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-P", "-c", _SERVE, str(target), *ASSETS, "why.json"],
        cwd=empty, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"served {len(ASSETS) + 2}"  # the page, the assets, why.json
