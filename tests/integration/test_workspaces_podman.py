"""SPEC X4a, the first slice of workspaces: built from a requirements.txt on the base image with
`podman build` (the only step with a network), BUILDING → READY | FAILED, and a job naming a
READY workspace runs in its image with no network; a FAILED or missing one is never used."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jpu.backends import BackendError
from jpu.backends.workspaces import PipSite, Workspace, Workspaces, pip_site
from jpu.testing.local_world import LocalWorld
from jpu.testing.unavailable import needs_root
from jpu.testing.waits import wait_end

# the site's package-index configuration, passed in explicitly (the host's pip.conf is not seen)
SITE = PipSite(ca_bundle="/etc/ssl/certs/ca-certificates.crt")
IMPORT = "python3 -c 'import six; print(\"six\", six.__version__)'\n"
needs_root("rootful podman: the agent is root")


@pytest_asyncio.fixture
async def world() -> AsyncIterator[LocalWorld]:
    assert shutil.which("podman"), "podman is missing: run scripts/install-podman"
    w = LocalWorld("jpu-ws", isolation="container", pip=SITE)
    try:
        yield w
    finally:
        built = [(d.parent.name, d.name) for d in (w.data_dir / "workspaces").glob("*/*")]
        spaces = w.backends[0].workspaces if w.backends else None
        await w.aclose()
        for user, name in built if spaces else []:
            assert spaces is not None
            box = spaces.build_container(user, name)  # a killed builder's is left running
            subprocess.run(["podman", "rm", "--force", "--ignore", box], capture_output=True)
            image = spaces.image_of(user, name)
            subprocess.run(["podman", "rmi", "--ignore", "--force", image], capture_output=True)


def _wait_built(workspaces: Workspaces, user: str, name: str, timeout: float) -> Workspace:
    deadline = time.monotonic() + timeout
    while True:
        ws = workspaces.get(user, name)
        assert ws is not None
        if ws.state != "BUILDING":
            return ws
        assert time.monotonic() < deadline, workspaces.log(user, name)
        time.sleep(0.2)


async def test_X4a_job_in_a_workspace_imports_what_its_build_installed(world: LocalWorld) -> None:
    backend = world.backend()
    name = f"six-{os.getpid()}"
    builder = backend.workspaces.start_build("alice", name, "six\n")
    assert backend.workspaces.get("alice", name).state == "BUILDING"  # type: ignore[union-attr]
    ws = _wait_built(backend.workspaces, "alice", name, 600)
    assert builder.wait(30) == 0
    log = backend.workspaces.log("alice", name)
    assert ws.state == "READY", log
    assert "Successfully installed six" in log  # the build reached the package index
    assert ws.size and ws.size > 0 and ws.created_at and ws.built_at
    assert ws.created_at <= ws.built_at

    probe = (
        IMPORT + '(exec 3<>"/dev/tcp/127.0.0.1/22") 2>/dev/null && echo net=on || echo net=off\n'
    )
    inside = world.spec(probe, workspace=name)
    status = await wait_end(backend, await backend.submit(inside), 60)
    out = (Path(inside.output_dir) / "stdout").read_text()
    assert status.state == "COMPLETED", (Path(inside.output_dir) / "stderr").read_text()
    assert status.isolation == "container:podman" and "six 1." in out and "net=off" in out
    outside = world.spec(IMPORT)  # the base image: the same import fails
    status = await wait_end(backend, await backend.submit(outside), 60)
    assert status.state == "FAILED"
    assert "No module named 'six'" in (Path(outside.output_dir) / "stderr").read_text()


async def test_X4a_failed_build_shows_its_log_and_is_never_used(world: LocalWorld) -> None:
    backend = world.backend()
    backend.workspaces.start_build("alice", "broken", "this is not a requirement !!\n")
    ws = _wait_built(backend.workspaces, "alice", "broken", 300)
    assert ws.state == "FAILED" and ws.reason and "build log" in ws.reason
    assert "Invalid requirement" in backend.workspaces.log("alice", "broken")
    with pytest.raises(BackendError, match=r"workspace: 'broken' is FAILED"):
        await backend.submit(world.spec("true", workspace="broken"))
    with pytest.raises(BackendError, match=r"workspace: 'nope' does not exist"):
        await backend.submit(world.spec("true", workspace="nope"))
    assert await backend.running() == []  # nothing launched


async def test_X4a_a_builder_that_dies_leaves_FAILED_never_READY(world: LocalWorld) -> None:
    backend = world.backend()
    builder = backend.workspaces.start_build("alice", "killed", "six\n")
    os.killpg(builder.pid, signal.SIGKILL)  # the builder and its podman build die mid-way
    builder.wait(30)
    ws = backend.workspaces.get("alice", "killed")
    assert ws is not None and ws.state == "FAILED" and ws.reason
    assert "builder died" in ws.reason
    image = backend.workspaces.image_of("alice", "killed")
    assert subprocess.run(["podman", "image", "exists", image], check=False).returncode != 0


def _local_index(root: Path, name: str) -> Path:
    """A package index in a host directory (as a site's mirror or a pip.conf's file:// index):
    one hand-made wheel of a package that exists nowhere else, under `<root>/simple/<name>/`."""
    dist = f"{name}-1.0"
    files = {
        f"{name}/__init__.py": "VERSION = '1.0'\n",
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: jpu-test\n"
        "Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{dist}.dist-info/RECORD,,\n"
    wheel = root / "files" / f"{dist}-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in {**files, f"{dist}.dist-info/RECORD": record}.items():
            z.writestr(path, text)
    page = root / "simple" / name / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(f'<a href="../../files/{wheel.name}">{wheel.name}</a>\n')
    return root / "simple"


async def test_X4a_build_uses_the_package_index_the_hosts_pip_is_configured_with(
    world: LocalWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No JPU_WORKSPACE_PIP_* setting: the host's pip configuration (here a pip.conf naming a
    local index, as PIP_CONFIG_FILE) is what the build's pip uses, and the log says so. The
    package exists only in that index, so READY proves the build used it."""
    index = _local_index(tmp_path / "index", "jpuhostonly")
    conf = tmp_path / "pip.conf"
    conf.write_text(f"[global]\nindex-url = file://{index}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    tmp_path.chmod(0o755)
    site = pip_site("", "")  # the agent's default: no site settings
    assert site.index_url == f"file://{index}" and "host's pip configuration" in site.source
    spaces = Workspaces(world.data_dir / "workspaces", world.backend().workspaces.podman, site)
    name = f"hostidx-{os.getpid()}"
    builder = spaces.start_build("alice", name, "jpuhostonly\n")
    ws = _wait_built(spaces, "alice", name, 600)
    log = spaces.log("alice", name)
    assert ws.state == "READY", f"{ws.reason}\n{log}"
    assert builder.wait(30) == 0
    assert f"package index: file://{index}" in log.splitlines()[0]
    assert "from the host's pip configuration" in log.splitlines()[0]
    assert "Successfully installed jpuhostonly-1.0" in log
