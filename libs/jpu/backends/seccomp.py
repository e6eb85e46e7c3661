"""SPEC SEC6: the seccomp profile of a job's container — podman's own default, minus nested user
namespaces.

Podman's default profile (/usr/share/containers/seccomp.json: an allowlist, anything else
ENOSYS) allows `unshare`, `clone`, `clone3` and `setns` to everyone, so `unshare -Ur` works
inside a job and gives it a root of its own to attack the kernel with. `profile` keeps every
other rule and makes those four:
  * unshare, clone   allowed unless CLONE_NEWUSER is among the flags (argument 0), then EPERM;
  * clone3           ENOSYS (its flags are in a struct seccomp cannot look into: glibc then
                     falls back to clone, which is filtered);
  * setns            EPERM (a job has no namespace of its own to join; no capability either).
Without podman's file (another distribution's path), the same four rules over allow-by-default.
`profile` is pure; `write_profile` is the edge that reads podman's file and writes ours.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Final

PODMAN_DEFAULT: Final = Path("/usr/share/containers/seccomp.json")
CLONE_NEWUSER: Final = 0x10000000
EPERM: Final = 1
ENOSYS: Final = 38
FILTERED: Final = frozenset({"unshare", "clone", "clone3", "setns"})


def _no_newuser(name: str, allowed: bool) -> dict[str, Any]:
    value = 0 if allowed else CLONE_NEWUSER
    rule: dict[str, Any] = {
        "names": [name],
        "action": "SCMP_ACT_ALLOW" if allowed else "SCMP_ACT_ERRNO",
        "args": [
            {"index": 0, "value": CLONE_NEWUSER, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}
        ],
    }
    if not allowed:
        rule["errnoRet"] = EPERM
    return rule


def _ours() -> list[dict[str, Any]]:
    rules = [_no_newuser(n, ok) for n in ("unshare", "clone") for ok in (True, False)]
    rules.append({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": ENOSYS})
    rules.append({"names": ["setns"], "action": "SCMP_ACT_ERRNO", "errnoRet": EPERM})
    return rules


def profile(base: dict[str, Any] | None) -> dict[str, Any]:
    """The job's profile: `base` (podman's default, parsed) without any rule that names the
    four filtered calls, plus ours; None: allow-by-default with ours."""
    if base is None:
        return {"defaultAction": "SCMP_ACT_ALLOW", "syscalls": _ours()}
    kept = []
    for rule in base.get("syscalls", []):
        names = [n for n in rule.get("names", []) if n not in FILTERED]
        if names:
            kept.append({**rule, "names": names})
    return {**base, "syscalls": [*kept, *_ours()]}


def write_profile(path: Path, base: Path = PODMAN_DEFAULT) -> Path:
    """Write the profile to `path` (0644, atomically: a container starting meanwhile reads
    the old or the new one whole). Podman reads it at each `run`."""
    try:
        parsed: dict[str, Any] | None = json.loads(base.read_text())
    except (OSError, ValueError):
        parsed = None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".seccomp-")
    with os.fdopen(fd, "w") as f:
        json.dump(profile(parsed), f)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path
