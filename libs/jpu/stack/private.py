"""SPEC SEC1: the platform's data directory is not enterable by job accounts.

The stack makes its data directory 0700 at start. What an account other than root must reach
lives, when the stack runs as root, in a directory of its own under /var/lib/jpu-share, one per
data directory (named after a digest of its absolute path, so every service and every restart
of the same checkout finds the same one):

  * `pg-<digest>`: the embedded PostgreSQL's cluster (its server runs as `postgres`);
  * `outputs-<digest>`: the JOB_OUTPUT_DIRs (each job's account enters its own; 0711, so no
    account lists the others' job ids).

What an earlier run left at the old place (`<data_dir>/pg`, `<data_dir>/outputs`) is moved
there once: never abandoned, never overwritten. Not root: the jobs run as the stack's own
account, and everything stays in the data directory.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

from jpu.backends import joblogs
from jpu.config import Config

log = logging.getLogger("jpu.stack")

SITE_DIR = joblogs.SITE_DIR
KINDS = ("pg", "outputs")  # what lives outside, per data dir
OUTPUTS_MODE = 0o711  # traversable to reach one's own <job_id>/, not listable


def outside(data_dir: Path, kind: str, site_dir: Path = SITE_DIR) -> Path:
    """`<site_dir>/<kind>-<digest of the data dir's absolute path>` (not created)."""
    return joblogs.site_path(data_dir, kind, site_dir)


def make_private(data_dir: Path) -> None:
    """The data directory, created if needed, with mode 0700 (SPEC SEC1). A shared directory
    (`/tmp`, `/home`: top-level or sticky) is refused, never closed to everyone else."""
    data_dir.mkdir(parents=True, exist_ok=True)
    real = Path(os.path.realpath(data_dir))
    if len(real.parts) <= 2 or real.stat().st_mode & stat.S_ISVTX:
        raise RuntimeError(f"data_dir {real} is a shared directory; give the platform its own")
    data_dir.chmod(0o700)


def site_dir_for(data_dir: Path, kind: str) -> Path:
    """`outside(data_dir, kind)`, with /var/lib/jpu-share made (0755) if needed."""
    SITE_DIR.mkdir(parents=True, exist_ok=True)
    SITE_DIR.chmod(0o755)
    return outside(data_dir, kind)


def chosen_output_root(config: Config, env: Mapping[str, str]) -> Path | None:
    """As root with no output root configured (neither JPU_AGENT_OUTPUT_ROOT nor the
    `output_root` key): the outputs directory outside the data dir. None: the agent's own
    default stands (joblogs.output_root). No side effect: tests ask it too."""
    if os.geteuid() != 0 or env.get("JPU_AGENT_OUTPUT_ROOT") or config.output_root:
        return None
    return outside(Path(config.data_dir), "outputs")


def output_root(config: Config, env: Mapping[str, str]) -> Path:
    """The root of every JOB_OUTPUT_DIR of a stack started with `config` and `env`."""
    return chosen_output_root(config, env) or joblogs.output_root(config, env)


def prepare_output_root(config: Config, env: Mapping[str, str]) -> Path | None:
    """`chosen_output_root`, made (root's, 0711) and holding what `<data_dir>/outputs` held."""
    root = chosen_output_root(config, env)
    if root is None:
        _check_configured_root(config, env)
        return None
    site_dir_for(Path(config.data_dir), "outputs")
    carry_over(Path(config.data_dir) / "outputs", root, merge=True)
    root.mkdir(exist_ok=True)
    os.chown(root, 0, 0)
    root.chmod(OUTPUTS_MODE)
    return root


def _check_configured_root(config: Config, env: Mapping[str, str]) -> None:
    """As root, an output root configured inside the data dir is refused at start: no job
    account could reach its JOB_OUTPUT_DIR there (SPEC SEC1)."""
    root = Path(os.path.realpath(joblogs.output_root(config, env)))
    data = Path(os.path.realpath(config.data_dir))
    if os.geteuid() == 0 and root.is_relative_to(data):
        raise RuntimeError(
            f"output_root {root} lies inside the data dir {data}, which no job account may enter "
            "(SPEC SEC1); choose a directory outside it, or leave output_root unset"
        )


def carry_over(old: Path, new: Path, *, merge: bool) -> None:
    """Move `old` to `new` once. Both present: with `merge`, the entries `new` lacks are moved
    and a name in both stays in `old` (logged); without, it is an error naming both."""
    if not old.exists():
        return
    if not new.exists():
        _move(old, new)
        log.info("moved out of the data dir", extra={"from": str(old), "to": str(new)})
        return
    if not merge:
        raise RuntimeError(
            f"both {old} and {new} hold data of this checkout; keep one (move the other away) "
            "and start again"
        )
    left = []
    for entry in sorted(old.iterdir()):
        if (new / entry.name).exists():
            left.append(entry.name)
        else:
            _move(entry, new / entry.name)
    if left:
        log.warning("left in the data dir: already present outside", extra={"dir": str(old),
                    "names": left[:20]})  # fmt: skip
    else:
        old.rmdir()


def _move(src: Path, dst: Path) -> None:
    """rename(2); across file systems a copy keeping owners and modes (`cp -a`), then removal."""
    try:
        os.rename(src, dst)
        return
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
    partial = dst.with_name(dst.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(["cp", "-a", "--", str(src), str(partial)], check=True, capture_output=True)
    os.rename(partial, dst)
    shutil.rmtree(src)
