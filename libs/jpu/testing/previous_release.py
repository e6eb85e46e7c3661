"""The previous release of the platform, runnable next to this checkout (the rolling-upgrade test,
tests/e2e/test_rolling_upgrade.py; docs/operations.md, Upgrades).

`PREVIOUS_RELEASE` is the one place that names it. At each release, move it to the commit that
was just released (the one deployments run before they upgrade to the next), once CI passed on
it; the test then upgrades from it to the checkout under test. It must run unchanged against the
servers as this checkout sets them up (the same `JPU_*` environment, NATS with one identity per
service, SPEC SEC2): a commit from before the per-service identities (668303e) could not.

`checkout()` gives a `git worktree` of that commit with its own venv (the project installed into it
editable, as `make install` does), built once per commit into a cache directory
(`JPU_RELEASE_CACHE`, default `~/.cache/jpu-share/releases`) and reused by later runs.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# The release deployments run before this one: 55e746f ("R7 property test: a loan whose shadow lies
# past the simulated horizon ..."), main before the NATS password format changed (531c01f, which
# changed no event, projection or service interface).
PREVIOUS_RELEASE = "55e746f07c6e9b1b81ebed6660a63be1cd1aff2f"

ROOT = Path(__file__).resolve().parents[3]
CACHE_ENV = "JPU_RELEASE_CACHE"
_STAMP = ".installed"


@dataclass(frozen=True)
class Release:
    commit: str
    src: Path  # the commit's worktree
    python: Path  # its venv's interpreter

    def service_argv(self, service: str) -> list[str]:
        return [str(self.python), "-m", f"jpu_services.{service}"]


def cache_dir() -> Path:
    raw = os.environ.get(CACHE_ENV, "").strip()
    return Path(raw) if raw else Path.home() / ".cache" / "jpu-share" / "releases"


def _git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=check, timeout=300
    )


def resolve(commit: str = PREVIOUS_RELEASE) -> str:
    """The full hash of `commit` in this clone. A shallow clone (CI may make one) is deepened
    from its origin first; a commit still missing is an error saying what to do."""

    def have() -> str | None:
        r = _git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", check=False)
        return r.stdout.strip() or None

    if (found := have()) is not None:
        return found
    shallow = _git("rev-parse", "--is-shallow-repository", check=False).stdout.strip() == "true"
    if shallow:
        _git("fetch", "--quiet", "--unshallow", "origin", check=False)
    if (found := have()) is None:
        _git("fetch", "--quiet", "origin", commit, check=False)
        found = have()
    if found is None:
        raise RuntimeError(
            f"the previous release {commit} (jpu.testing.previous_release.PREVIOUS_RELEASE) is "
            f"not in this clone of {ROOT}{' (shallow)' if shallow else ''} and could not be "
            "fetched from origin: run the test in a full clone of main (git fetch --unshallow)"
        )
    return found


def checkout(commit: str = PREVIOUS_RELEASE) -> Release:
    """The release's worktree and venv, built on first use (a lock serialises concurrent runs)."""
    full = resolve(commit)
    home = cache_dir() / full
    src, venv = home / "src", home / "venv"
    release = Release(full, src, venv / "bin" / "python")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (venv / _STAMP).exists() and (src / "pyproject.toml").exists():
            return release
        t0 = time.monotonic()
        shutil.rmtree(src, ignore_errors=True)
        shutil.rmtree(venv, ignore_errors=True)
        _git("worktree", "prune")
        _git("worktree", "add", "--detach", "--force", str(src), full)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip = [str(release.python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "-e", str(src)], check=True, timeout=900, cwd=src)
        (venv / _STAMP).write_text(f"{full} built in {time.monotonic() - t0:.0f} s\n")
    return release
