"""NATS identities at the edges (SPEC SEC2): the passwords generated at first start into a 0600
secrets file, the server configuration written from jpu.bus.permissions, and the options a
client connects with (its identity and TLS, from the environment).

    JPU_NATS_USER      the identity (a service's name, or `admin`); unset: anonymous
    JPU_NATS_PASSWORD  its password, or
    JPU_NATS_SECRETS   a secrets file (`{"users": {user: password}}`) to look it up in
    JPU_NATS_TLS_CA / JPU_NATS_TLS_CERT / JPU_NATS_TLS_KEY   TLS to a server on another host

A tool on a checkout whose `make run` started the servers needs none of it: with no identity
set, the stack's own secrets file (`<data_dir>/secrets/nats.json`) gives it `admin`.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from jpu.bus import permissions

ADMIN: Final = permissions.ADMIN
SECRETS_FILE: Final = Path("secrets") / "nats.json"  # under the data dir


def secrets_path(data_dir: Path) -> Path:
    return Path(data_dir) / SECRETS_FILE


# A password NATS's config lexer reads back as the same string wherever it stands, a `$VAR`
# reference included (compose): letters first, then hex — never a number, a date or a size.
SAFE_PASSWORD: Final = re.compile(r"jpu[0-9a-f]{48}")


def new_password() -> str:
    return "jpu" + secrets.token_hex(24)


def ensure_secrets(path: Path) -> dict[str, str]:
    """user → password for admin and every service: read, or generated once (0600, its
    directory 0700) and kept across restarts. A service added later gets its password then."""
    users: dict[str, str] = {}
    if path.exists():
        users = dict(json.loads(path.read_text())["users"])
    # one NATS may not read back (an older, token_urlsafe one: `1234-56…` lexes as a date)
    users = {u: pw for u, pw in users.items() if SAFE_PASSWORD.fullmatch(pw)}
    wanted = (permissions.ADMIN, *permissions.SERVICES)
    if all(u in users for u in wanted):
        return users
    for user in wanted:
        users.setdefault(user, new_password())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.parent.chmod(0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"users": users}, f, indent=2)
    tmp.replace(path)
    return users


def write_server_config(path: Path, passwords: dict[str, str], stream: str, prefix: str) -> Path:
    """The embedded server's `-c` file: the authorization block (with the passwords: 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(permissions.render_authorization(passwords, stream=stream, prefix=prefix))
    os.chmod(path, 0o600)  # an older file keeps its mode through O_TRUNC
    return path


def identity_env(user: str, secrets_file: Path) -> dict[str, str]:
    """What a child process needs to connect as `user` (the password stays in the file)."""
    return {"JPU_NATS_USER": user, "JPU_NATS_SECRETS": str(secrets_file)}


def _default_secrets(env: Mapping[str, str]) -> Path:
    return secrets_path(Path(env.get("JPU_DATA_DIR") or ".jpu"))


def client_options(
    env: Mapping[str, str] | None = None, tls_files: tuple[str, str, str] = ("", "", "")
) -> dict[str, Any]:
    """nats.connect keyword arguments for this process's identity and TLS (may be empty).
    `tls_files`: the configuration's (nats_tls_ca, nats_tls_cert, nats_tls_key); the
    environment's JPU_NATS_TLS_* win."""
    env = os.environ if env is None else env
    options: dict[str, Any] = {}
    user = env.get("JPU_NATS_USER", "")
    password = env.get("JPU_NATS_PASSWORD", "")
    file = Path(env["JPU_NATS_SECRETS"]) if env.get("JPU_NATS_SECRETS") else None
    if not user and file is None and _default_secrets(env).exists():
        # SPEC SEC2: the operator's tools on the checkout run as admin of its own stack; a
        # server without authorization ignores the credentials.
        user, file = permissions.ADMIN, _default_secrets(env)
    if user and not password and file is not None:
        try:
            password = json.loads(file.read_text())["users"][user]
        except (OSError, ValueError, KeyError) as e:
            raise PermissionError(f"no NATS password for {user!r} in {file}: {e}") from e
    if user:
        options.update(user=user, password=password)
    keys = ("CA", "CERT", "KEY")
    ca, cert, key = (
        env.get(f"JPU_NATS_TLS_{k}") or f for k, f in zip(keys, tls_files, strict=True)
    )
    if ca or cert:
        tls = ssl.create_default_context(cafile=ca or None)
        if cert:
            tls.load_cert_chain(cert, key or None)
        options["tls"] = tls
    return options
