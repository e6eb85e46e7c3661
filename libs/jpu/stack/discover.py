"""Where the running stack's servers are (SPEC O2, O1).

`make run` starts NATS and PostgreSQL on free ports, so a tool on the same checkout cannot
guess them. While it runs, the stack records them in `<data_dir>/servers.json` (with its pid;
the file goes when it stops). `server_url` gives a tool its server: what the configuration
says when it says it (`JPU_NATS_URL` / `JPU_DATABASE_URL`, or the key in the `JPU_CONFIG`
file), else the running stack's, else `NoServer` — one sentence saying what to do — rather
than the built-in default, which may be another platform's server (or none).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

import yaml

FILE: Final = "servers.json"
_FLAG: Final = {"nats_url": "--nats", "database_url": "--database-url"}


class NoServer(Exception):
    """No server configured and no running stack found: the message says what to do."""


def record(data_dir: Path, urls: Mapping[str, str]) -> None:
    """Written by the stack once its servers are up (atomically: a reader never sees half)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = data_dir / f".{FILE}.{os.getpid()}"
    tmp.write_text(json.dumps({"pid": os.getpid(), **urls}, indent=2) + "\n")
    tmp.replace(data_dir / FILE)


def forget(data_dir: Path) -> None:
    """Removed by the stack that wrote it, when it stops."""
    if (running(data_dir) or {}).get("pid") == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            (data_dir / FILE).unlink()


def running(data_dir: Path) -> dict[str, str | int] | None:
    """The record of a stack that is still running (its pid alive), or None."""
    try:
        found = json.loads((data_dir / FILE).read_text())
        pid = int(found["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # a stack that crashed left it behind
    except PermissionError:
        pass  # alive, another user's
    return dict(found)


def configured(key: str, env: Mapping[str, str]) -> bool:
    """Did the configuration say `key` (an environment override, or the JPU_CONFIG file)?"""
    if f"JPU_{key.upper()}" in env:
        return True
    path = env.get("JPU_CONFIG")
    if not path:
        return False
    with contextlib.suppress(OSError, yaml.YAMLError):
        raw = yaml.safe_load(Path(path).read_text())
        return isinstance(raw, dict) and key in raw
    return False


def server_url(key: str, configured_value: str, data_dir: Path, env: Mapping[str, str]) -> str:
    """`nats_url` / `database_url`: the configured one, else the running stack's."""
    if configured(key, env):
        return configured_value
    stack = running(data_dir)
    if stack is not None and stack.get(key):
        return str(stack[key])
    raise NoServer(
        f"no {key} configured (JPU_{key.upper()}, `{key}` in the JPU_CONFIG file, or "
        f"{_FLAG.get(key, '--' + key)}) and no running stack recorded in {data_dir / FILE}: "
        "start one with `make run` in this checkout, or say which server to use"
    )
