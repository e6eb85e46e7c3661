"""`jpu slurm-shims install|uninstall DIR`: `sbatch`, `squeue`, `scancel`, `sacct`, `scontrol` as
small executables in DIR, each running `jpu NAME` — opt-in, and never in front of a real Slurm.

A shim is a two-line sh script marked `jpu-slurm-shim`. Install refuses a name when another
executable of that name (a Slurm install: `/usr/bin/squeue`) is anywhere on PATH — before DIR
the shim would never run, after it the shim would hide Slurm — and never overwrites a file it
did not write. At run time a shim checks again (Slurm may be installed later): finding another
NAME on PATH, it says so on stderr and runs that one, not `jpu`.

    python -P -m jpu.cli.slurm_shim_run SHIM_PATH NAME ARGS...   (what a shim runs)

The runner is a module of its own, beside main.py: it imports `main`, and this module, which
main's `slurm-shims` subcommand imports, must not.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Final

NAMES: Final = ("sbatch", "squeue", "scancel", "sacct", "scontrol")
MARK: Final = "jpu-slurm-shim"
RUNNER: Final = "jpu.cli.slurm_shim_run"  # the module a shim runs
USER_ERRORS: tuple[type[Exception], ...] = (OSError,)


class ShimError(Exception):
    """A shim not written: the reason, one line."""


def is_shim(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return MARK.encode() in f.read(512)
    except OSError:
        return False


def other_on_path(name: str, path_env: str, mine: Path | None = None) -> Path | None:
    """The first executable `name` on PATH that is not a jpu shim (nor `mine`), or None."""
    for d in path_env.split(os.pathsep):
        candidate = Path(d or ".") / name
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        if mine is not None and candidate.resolve() == mine.resolve():
            continue
        if not is_shim(candidate):
            return candidate
    return None


def shim_text(name: str, python: str) -> str:
    run = " ".join(shlex.quote(w) for w in (python, "-P", "-m", RUNNER))
    return (
        f"#!/bin/sh\n# {MARK}: `{name}` runs `jpu {name}` (jpu slurm-shims install; "
        f'a Slurm {name} on PATH wins)\nexec {run} "$0" {name} "$@"\n'
    )


def install(directory: Path, path_env: str, python: str) -> tuple[list[str], list[str]]:
    """Write the shims into `directory`: (names written, one line per name refused)."""
    directory.mkdir(parents=True, exist_ok=True)
    written, refused = [], []
    for name in NAMES:
        target = directory / name
        real = other_on_path(name, path_env, mine=target)
        if target.exists() and not is_shim(target):
            refused.append(f"{name}: {target} exists and is not a jpu shim; left as it is")
        elif real is not None:
            refused.append(
                f"{name}: not installed: a {name} is already on your PATH at {real} "
                f"(Slurm's?); a shim would hide it or never run — use `jpu {name}`"
            )
        else:
            target.write_text(shim_text(name, python))
            target.chmod(0o755)
            written.append(name)
    return written, refused


def uninstall(directory: Path) -> list[str]:
    removed = []
    for name in NAMES:
        target = directory / name
        if is_shim(target):
            target.unlink()
            removed.append(name)
    return removed


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "slurm-shims",
        help="put sbatch/squeue/scancel/sacct/scontrol on your PATH (never over a real Slurm)",
        description="Write small executables named like Slurm's commands into DIR, each "
        "running `jpu NAME`. A name whose command already exists on PATH (a real Slurm) is "
        "refused; at run time a shim that finds a real one runs that instead. Then add DIR to "
        "your PATH (e.g. export PATH=DIR:$PATH).",
    )
    p.add_argument("action", choices=["install", "uninstall"])
    p.add_argument("directory", metavar="DIR", type=Path, help="e.g. ~/.local/share/jpu/bin")
    p.set_defaults(func=cmd_shims)


def cmd_shims(args: argparse.Namespace) -> int:
    directory = args.directory.expanduser().absolute()
    if args.action == "uninstall":
        removed = uninstall(directory)
        print(f"Removed {', '.join(removed) or 'nothing'} from {directory}")
        return 0
    path_env = os.environ.get("PATH", "")
    written, refused = install(directory, path_env, sys.executable)
    for line in refused:
        print(f"jpu slurm-shims: refused: {line}", file=sys.stderr)
    if written:
        print(f"Installed {', '.join(written)} in {directory}")
        dirs = [Path(d).absolute() for d in path_env.split(os.pathsep) if d]
        if directory not in dirs:
            print(f"Add it to your PATH: export PATH={shlex.quote(str(directory))}:$PATH")
    return 1 if refused else 0


if __name__ == "__main__":
    # A shim written before the runner had a module of its own: the same run, by its new name
    # (a process, not an import: the runner imports main, which imports this module).
    os.execv(sys.executable, [sys.executable, "-P", "-m", RUNNER, *sys.argv[1:]])
