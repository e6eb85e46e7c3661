"""What a `jpu slurm-shims` shim runs (SPEC U1, U8):
`python -P -m jpu.cli.slurm_shim_run SHIM_PATH NAME ARGS...`. A real NAME elsewhere on PATH (a
Slurm installed after the shim) is run instead, with a line on stderr; otherwise `jpu NAME ARGS`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from jpu.cli.main import main
from jpu.cli.slurm_shims import MARK, other_on_path


def run(shim: str, name: str, argv: Sequence[str]) -> int:
    """A real `name` on PATH if there is one (never shadowed), else jpu's."""
    real = other_on_path(name, os.environ.get("PATH", ""), mine=Path(shim))
    if real is not None:
        print(f"{MARK}: running the {name} at {real}, not jpu's", file=sys.stderr)
        os.execv(real, [name, *argv])
    return main([name, *argv])


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
