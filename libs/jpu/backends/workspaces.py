"""Workspaces (SPEC X4a), the first slice: a named environment of a user, built from a
`requirements.txt` on the site's base image with podman, the only step with a network.

    <root>/<user>/<name>/state.json        {"state", "reason", "image", "size", "created_at", …}
    <root>/<user>/<name>/requirements.txt  what the owner asked for
    <root>/<user>/<name>/build.log         podman build's output, readable by its owner

States: BUILDING, then READY or FAILED (with its reason). The image is tagged (`podman commit`)
only when the install succeeded, and READY is written only after that, so a build that dies
leaves BUILDING with its builder's pid: whoever reads it after the builder died sees FAILED
("the builder died"), never a half-made workspace marked READY. The build runs in its own
process (`build` below, started by `start_build`), never in the dispatcher's or the gateway's.

Network while building: the dedicated `jpu-build` bridge, which the host's firewall refuses
(jpu.backends.buildnet, SPEC SEC4): outbound to the package index, never to the host. The
host's pip configuration is invisible in a container: the site's package index and CA bundle are
passed in explicitly (`PipSite`), as arguments of the build script (they never stay in the
image). `podman run` + `podman commit` for a requirements.txt.
A Containerfile source (checked by jpu.domain.workspaces.containerfile_problem: one stage on the
base image, no build context) is built with `podman build` on the same `jpu-build` network;
pip inside sees the site's index and CA through a pip.conf and the CA file
mounted only while the RUN steps run (empty mount points are what stays of them in the image).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from jpu.backends import buildnet
from jpu.backends.base import BackendError
from jpu.backends.isolation import WORKSPACE_IMAGE_PREFIX, Podman, podman_base
from jpu.backends.pip_config import PipSite, describe, from_host, parse_listing, resolve
from jpu.backends.process import is_alive, start_ticks

State = Literal["BUILDING", "READY", "FAILED"]
NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")  # also a valid part of an image tag
CA_IN_BUILD = "/run/jpu-site-ca.crt"
REQS_IN_BUILD = "/run/jpu-requirements.txt"
CONTAINERFILE = "Containerfile"  # the scratch's source when the workspace is built from one
VENV = "/opt/venv"  # where a workspace's packages are: first on a job's PATH (venv_env)
VENV_PATH = f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# run in the build container; $1 the index URL, $2 the CA file, $3 the extra index URLs, $4 the
# trusted hosts (space-separated; "" each: pip's defaults). They are the shell's own variables,
# never the container's configuration, so not in the image.
BUILD_SCRIPT = """set -e
mkdir -p /opt/workspace && cp /run/jpu-requirements.txt /opt/workspace/requirements.txt
python3 -m venv /opt/venv
if [ -n "$1" ]; then export PIP_INDEX_URL="$1"; fi
if [ -n "$2" ]; then export PIP_CERT="$2"; fi
if [ -n "$3" ]; then export PIP_EXTRA_INDEX_URL="$3"; fi
if [ -n "$4" ]; then export PIP_TRUSTED_HOST="$4"; fi
/opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check \\
  -r /opt/workspace/requirements.txt
"""


@dataclass(frozen=True)
class Workspace:
    user: str
    name: str
    state: State
    image: str
    reason: str | None = None
    size: int | None = None  # bytes of the image
    created_at: float | None = None
    built_at: float | None = None


def host_pip_listing() -> str:
    """`pip config list` as this host's pip reports it (its files and PIP_* environment); "" when
    pip cannot say (then pip's defaults apply in the build, or the site's settings)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout if done.returncode == 0 else ""


def pip_site(index_url: str, ca_bundle: str, listing: str | None = None) -> PipSite:
    """What builds hand pip: the host's pip configuration, overridden by the site's settings
    (jpu.backends.pip_config)."""
    host = from_host(parse_listing(host_pip_listing() if listing is None else listing))
    return resolve(index_url, ca_bundle, host)


def _mounts(pip: PipSite) -> list[str]:
    """The CA file and the local (`file://`) indexes of `pip`, read-only, for the build."""
    mounts: list[str] = []
    if pip.ca_bundle:
        mounts += ["--volume", f"{pip.ca_bundle}:{CA_IN_BUILD}:ro"]
    for d in pip.local_dirs():
        if Path(d).is_dir():
            mounts += ["--volume", f"{d}:{d}:ro"]
    return mounts


def venv_env(env: dict[str, str], user_env: dict[str, str]) -> dict[str, str]:
    """A job in a workspace finds its packages first (the platform's PATH would hide the image's
    own); a PATH the user set is the user's."""
    if "PATH" in user_env:
        return env
    return {**env, "PATH": f"{VENV}/bin:{env['PATH']}", "VIRTUAL_ENV": VENV}


class Workspaces:
    def __init__(self, root: Path, podman: Podman, pip: PipSite | None = None) -> None:
        self.root = Path(root)
        self.podman = podman
        self.pip = pip or PipSite()

    def image_of(self, user: str, name: str) -> str:
        return f"{WORKSPACE_IMAGE_PREFIX}{user.lower()}-{name}:latest"

    def dir(self, user: str, name: str) -> Path:
        return self.root / user / name

    def get(self, user: str, name: str) -> Workspace | None:
        """The workspace's state; a BUILDING one whose builder is gone is FAILED."""
        try:
            raw = json.loads((self.dir(user, name) / "state.json").read_text())
        except FileNotFoundError:
            return None
        builder = raw.pop("builder", None)
        if raw["state"] == "BUILDING" and builder and not is_alive(*builder):
            raw.update(state="FAILED", reason="the builder died before the build ended")
        return Workspace(**raw)

    def require_ready(self, user: str, name: str) -> str:
        """The image a job naming this workspace runs in; an error naming `workspace` else."""
        ws = self.get(user, name)
        if ws is None:
            raise BackendError(f"workspace: {name!r} does not exist for {user}")
        if ws.state != "READY":
            raise BackendError(f"workspace: {name!r} is {ws.state}, not READY")
        return ws.image

    def image_exists(self, image: str) -> bool:
        exists = [*podman_base(self.podman), "image", "exists", image]
        return subprocess.run(exists, capture_output=True, check=False).returncode == 0

    def start_build(
        self, user: str, name: str, requirements: str, kind: str = "requirements"
    ) -> subprocess.Popen[bytes]:
        """BUILDING at once; the build itself runs in a process of its own (`build`). `kind`
        "containerfile": `requirements` is a Containerfile (checked beforehand)."""
        if not NAME.match(name) or not re.match(r"^[A-Za-z0-9_.-]{1,64}$", user):
            raise BackendError(f"workspace: {name!r} is not a valid name ([a-z0-9_.-], 64)")
        ws = self.get(user, name)
        if ws is not None and ws.state == "BUILDING":
            raise BackendError(f"workspace: {name!r} is already building")
        d = self.dir(user, name)
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        (d / CONTAINERFILE).unlink(missing_ok=True)
        (d / (CONTAINERFILE if kind == "containerfile" else "requirements.txt")).write_text(
            requirements
        )
        (d / "build.log").write_bytes(b"")
        self._write(user, name, "BUILDING", builder=None)
        p = self.podman
        child = subprocess.Popen(
            [sys.executable, "-m", "jpu.backends.workspaces", str(self.root), user, name,
             p.bin, p.storage, p.image, json.dumps(dataclasses.asdict(self.pip))],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        try:  # the builder waits for its stdin to close: it never ends before this is written
            self._write(user, name, "BUILDING", builder=(child.pid, start_ticks(child.pid) or 0))
        finally:
            assert child.stdin is not None
            child.stdin.close()
        return child

    def build_container(self, user: str, name: str) -> str:
        return f"jpu-wsbuild-{user.lower()}-{name}"

    def build(self, user: str, name: str) -> Workspace:
        """In the builder process: the install in a container of the base image with a network
        (jpu-build: outbound only, SEC4), then `podman commit` to the workspace's tag — READY
        (tagged, sized) — or FAILED with the build log. The build container is always removed."""
        d, base = self.dir(user, name), podman_base(self.podman)
        try:  # SEC4: no build without its fence around the host
            buildnet.ensure(base)
        except BackendError as e:
            return self._write(user, name, "FAILED", reason=str(e))
        if (d / CONTAINERFILE).exists():
            return self._build_containerfile(user, name)
        box = self.build_container(user, name)
        subprocess.run([*base, "rm", "--force", "--ignore", box], capture_output=True, check=False)
        mounts = ["--volume", f"{d / 'requirements.txt'}:{REQS_IN_BUILD}:ro", *_mounts(self.pip)]
        ca = CA_IN_BUILD if self.pip.ca_bundle else ""
        pip = self.pip
        run = [*base, "run", "--name", box, *buildnet.RUN_ARGS, "--log-driver=passthrough",
               *mounts, self.podman.image, "/bin/sh", "-c", BUILD_SCRIPT, "jpu-build",
               pip.index_url, ca, " ".join(pip.extra_index_urls),
               " ".join(pip.trusted_hosts)]  # fmt: skip
        commit = [*base, "commit", "--quiet", "--change", f"ENV {VENV_PATH}", box,
                  self.image_of(user, name)]  # fmt: skip
        try:
            with open(d / "build.log", "ab") as log:
                log.write(f"{describe(self.pip)}\n".encode())
                log.flush()
                for step in (run, commit):
                    done = subprocess.run(step, stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=subprocess.STDOUT, check=False)  # fmt: skip
                    if done.returncode != 0:
                        reason = f"{step[len(base)]} exited {done.returncode} (see the build log)"
                        return self._write(user, name, "FAILED", reason=reason)
        finally:
            subprocess.run([*base, "rm", "--force", "--ignore", box], capture_output=True)
        size = subprocess.run(
            [*base, "image", "inspect", "--format", "{{.Size}}", self.image_of(user, name)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return self._write(user, name, "READY", size=int(size.stdout.strip() or 0) or None)

    def _build_containerfile(self, user: str, name: str) -> Workspace:
        """`podman build` of the owner's Containerfile, from an empty context, with the network
        (jpu-build: outbound only, SEC4), never pulling (the base is local)."""
        d, base = self.dir(user, name), podman_base(self.podman)
        context = d / "context"
        context.mkdir(exist_ok=True)
        pip = self.pip
        mounts = _mounts(pip)
        pip_conf = "[global]\n" + "".join(
            f"{key} = {value}\n"
            for key, value in (
                ("index-url", pip.index_url),
                ("cert", CA_IN_BUILD if pip.ca_bundle else ""),
                ("extra-index-url", " ".join(pip.extra_index_urls)),
                ("trusted-host", " ".join(pip.trusted_hosts)),
            )
            if value
        )
        (d / "pip.conf").write_text(pip_conf)
        mounts += ["--volume", f"{d / 'pip.conf'}:/etc/pip.conf:ro"]
        argv = [*base, "build", "--pull=never", "--layers=false", "--force-rm", *buildnet.RUN_ARGS,
                *mounts,
                "--file", str(d / CONTAINERFILE), "--tag", self.image_of(user, name),
                str(context)]  # fmt: skip
        with open(d / "build.log", "ab") as log:
            log.write(f"{describe(pip)}\n".encode())
            log.flush()
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, check=False)  # fmt: skip
        if done.returncode != 0:
            reason = f"build exited {done.returncode} (see the build log)"
            return self._write(user, name, "FAILED", reason=reason)
        return self._write(user, name, "READY", size=self._size(user, name))

    def _size(self, user: str, name: str) -> int | None:
        size = subprocess.run(
            [*podman_base(self.podman), "image", "inspect", "--format", "{{.Size}}",
             self.image_of(user, name)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return int(size.stdout.strip() or 0) or None

    def log(self, user: str, name: str) -> str:
        return (self.dir(user, name) / "build.log").read_text(errors="replace")

    def _write(self, user: str, name: str, state: State, **fields: object) -> Workspace:
        path = self.dir(user, name) / "state.json"
        try:
            old = json.loads(path.read_text())
        except FileNotFoundError:
            old = {"created_at": time.time()}
        image = self.image_of(user, name)
        raw = {**old, "user": user, "name": name, "state": state, "image": image, "reason": None}
        raw.update(fields)
        if state != "BUILDING":
            raw.update(builder=None, built_at=time.time())
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(raw))
        os.replace(tmp, path)  # a reader sees the old state or the new one, never half
        raw.pop("builder", None)
        return Workspace(**raw)


def _main(argv: list[str]) -> int:
    """The builder process: ROOT USER NAME PODMAN_BIN STORAGE BASE_IMAGE PIP_SITE (JSON)."""
    root, user, name, podman_bin, storage, base, site = argv
    sys.stdin.read()  # until start_build has recorded this process as the builder
    podman = Podman(base, bin=podman_bin, storage=storage)
    raw = json.loads(site)
    pip = PipSite(**{**raw, "extra_index_urls": tuple(raw["extra_index_urls"]),
                     "trusted_hosts": tuple(raw["trusted_hosts"])})  # fmt: skip
    ws = Workspaces(Path(root), podman, pip).build(user, name)
    return 0 if ws.state == "READY" else 1


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
