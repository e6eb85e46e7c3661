"""jpu-admin: labs, users and API tokens (`python -m jpu.tools.admin --help`); backup and
restore of the whole platform (jpu.tools.backup).

Every change is an event in the log (SPEC SEC3: jpu.tools.identities; the NATS admin identity
appends it) and waits until the `identities` projection holds it, so a token printed works at
once; lists are read from the database. NATS is `--nats-url` and the database `--database-url`,
else the configuration's (JPU_NATS_URL, JPU_DATABASE_URL or the JPU_CONFIG file), else the
running stack's on this checkout (jpu.stack.discover); with none, one sentence says what to do.
Tokens are printed once, on stdout; the log and the tables keep only their digests (SPEC §8 Auth).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import nats.errors

from jpu.config import Config, load_config
from jpu.domain.identities import IdentityError
from jpu.stack import discover
from jpu.store import auth
from jpu.tools import admin_usage, backup
from jpu.tools.identities import Identities

# Demo only (`make run`, README): well-known tokens `demo-<user>`; never seed these in production.
DEMO_LABS: dict[str, tuple[str, ...]] = {
    "BCG": ("bcg-alice", "bcg-bob"),
    "KDG": ("kdg-carol", "kdg-dave"),
    "OSL": ("osl-erin", "osl-frank"),
}
DEMO_ADMIN = ("admin", "BCG")


@dataclass(frozen=True, slots=True)
class DemoUser:
    name: str
    lab: str
    role: str
    token: str


def demo_users() -> list[DemoUser]:
    users = [
        DemoUser(u, lab, "user", auth.demo_token(u)) for lab, us in DEMO_LABS.items() for u in us
    ]
    users.append(DemoUser(DEMO_ADMIN[0], DEMO_ADMIN[1], "admin", auth.demo_token(DEMO_ADMIN[0])))
    return users


async def seed_demo(ids: Identities) -> list[DemoUser]:
    """Labs BCG, KDG, OSL with two users each and the admin `admin`; idempotent."""
    users = demo_users()
    for lab in DEMO_LABS:
        await ids.add_lab(lab)
    for u in users:
        await ids.add_user(u.name, u.lab, u.role)
        await ids.install_token(u.name, u.token)
    return users


async def seed_config_labs(ids: Identities, config: Config) -> int:
    """Labs and users named in the configuration file (SPEC O1); returns users created."""
    created = 0
    for lab in config.labs:
        await ids.add_lab(lab.name)
        for u in lab.users:
            created += await ids.add_user(u.name, lab.name, u.role, u.max_active_jobs)
    return created


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jpu-admin", description="labs, users and API tokens")
    p.add_argument("--database-url", help="PostgreSQL DSN (default: from the configuration)")
    p.add_argument("--nats-url", dest="nats", help="NATS URL (default: from the configuration)")
    p.add_argument(
        "--no-wait",
        action="store_true",
        help="append and return: the change takes effect when the projector folds it "
        "(default: wait until it has, up to 30 s)",
    )
    sub = p.add_subparsers(dest="what", required=True)

    lab = sub.add_parser("lab", help="labs").add_subparsers(dest="action", required=True)
    lab.add_parser("add", help="add a lab").add_argument("name")
    lab.add_parser("list", help="list labs")

    user = sub.add_parser("user", help="users").add_subparsers(dest="action", required=True)
    add = user.add_parser("add", help="add a user to a lab")
    add.add_argument("name")
    add.add_argument("--lab", required=True)
    add.add_argument("--role", default="user", choices=auth.ROLES)
    add.add_argument("--max-active-jobs", type=int, default=None)
    user.add_parser("list", help="list users").add_argument("--json", action="store_true")
    user.add_parser(
        "remove", help="revoke the user's tokens and disable the user (kept for the audit)"
    ).add_argument("name")

    token = sub.add_parser("token", help="API tokens").add_subparsers(dest="action", required=True)
    for action, text in (
        ("create", "issue an additional token (printed once)"),
        ("rotate", "revoke the user's tokens and issue a new one"),
        ("revoke", "revoke every token of the user"),
    ):
        token.add_parser(action, help=text).add_argument("user")

    sub.add_parser("seed-demo", help="demo labs, users and well-known tokens (demo only)")
    admin_usage.add_parsers(sub)  # from the log (NATS), not the database
    backup.add_parsers(sub)  # the streams, buckets and user tables to one file and back
    return p


async def _run(args: argparse.Namespace, pool: asyncpg.Pool, ids: Identities) -> None:
    what, action = args.what, getattr(args, "action", None)
    if what == "lab" and action == "add":
        created = await ids.add_lab(args.name)
        print(f"lab {args.name} {'added' if created else 'already exists'}")
    elif what == "lab":
        for row in await pool.fetch("SELECT name FROM labs ORDER BY name"):
            print(row["name"])
    elif what == "user" and action == "add":
        created = await ids.add_user(args.name, args.lab, args.role, args.max_active_jobs)
        removed = not created and await auth.get_user(pool, args.name) is None
        # a removed name is not reused: the log's jobs and charges already name that user
        state = "added" if created else "was removed" if removed else "already exists"
        print(f"user {args.name} {state}")
    elif what == "user" and action == "remove":
        revoked = await ids.remove_user(args.name)
        print(f"user {args.name} removed; revoked {revoked} token(s)")
    elif what == "user":
        _print_users(await auth.list_users(pool), as_json=args.json)
    elif what == "token" and action == "revoke":
        print(f"revoked {await ids.revoke_tokens(args.user)} token(s) of {args.user}")
    elif what == "token":
        make = ids.create_token if action == "create" else ids.rotate_token
        print(await make(args.user))  # shown once; the log and the tables keep its digest only
    elif what == "seed-demo":
        for u in await seed_demo(ids):
            print(f"{u.name:<10} {u.lab:<4} {u.role:<6} {u.token}")


def _print_users(users: list[tuple[auth.Principal, int]], *, as_json: bool) -> None:
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "name": p.name,
                        "lab": p.lab,
                        "role": p.role,
                        "max_active_jobs": p.max_active_jobs,
                        "active_tokens": n,
                    }
                    for p, n in users
                ]
            )
        )
        return
    print(f"{'USER':<16} {'LAB':<8} {'ROLE':<10} {'MAX_ACTIVE':<10} TOKENS")
    for p, n in users:
        limit = "default" if p.max_active_jobs is None else str(p.max_active_jobs)
        print(f"{p.name:<16} {p.lab:<8} {p.role:<10} {limit:<10} {n}")


async def _main(args: argparse.Namespace) -> None:
    from jpu.bus import EventBus
    from jpu.store.db import create_pool, migrate

    config = load_config()
    dsn = args.database_url or discover.server_url(
        "database_url", config.database_url, Path(config.data_dir), os.environ
    )
    url = args.nats or discover.server_url(
        "nats_url", config.nats_url, Path(config.data_dir), os.environ
    )
    pool = await create_pool(dsn)
    try:
        await migrate(pool)
        bus = await EventBus.connect(
            url, stream=config.stream_name, prefix=config.subject_prefix, name="jpu-admin"
        )
        try:  # SPEC SEC3: identities are events, recorded with who ran the tool
            waits = None if args.no_wait else pool
            await _run(args, pool, Identities(bus, waits, time.time(), by=_operator()))
        finally:
            await bus.close()
    finally:
        await pool.close()


def _operator() -> str:
    try:
        return f"{getpass.getuser()}@{socket.gethostname()} (jpu-admin)"
    except (OSError, KeyError):
        return "jpu-admin"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.what in admin_usage.COMMANDS:
        return admin_usage.main(args)
    if args.what in backup.COMMANDS:
        return backup.main(args)
    try:
        asyncio.run(_main(args))
    except (IdentityError, discover.NoServer) as e:
        print(f"jpu-admin: {e}", file=sys.stderr)
        return 2
    except TimeoutError as e:  # appended, but no projector folded it (yet)
        print(
            f"jpu-admin: recorded in the log, but not yet in effect ({e}): is the gateway's "
            "projector running?",
            file=sys.stderr,
        )
        return 1
    except nats.errors.Error as e:
        print(f"jpu-admin: NATS error: {e!r}", file=sys.stderr)
        return 1
    except (OSError, asyncpg.PostgresError) as e:
        print(f"jpu-admin: database error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
