"""`python -m jpu.stack run|servers|prepare` (see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from jpu.config import load_config
from jpu.runtime.service import setup_logging
from jpu.stack import discover, private, run
from jpu.stack.prepare import FIRST_ADMIN, prepare
from jpu.stack.servers import start_servers


def servers_only() -> int:
    """Start NATS + PostgreSQL, print shell-ready URLs, stop on Ctrl-C / SIGTERM."""
    data_dir = Path(load_config().data_dir).absolute()
    private.make_private(data_dir)  # SPEC SEC1
    servers = start_servers(data_dir, os.environ)
    discover.record(data_dir, run.urls(servers))  # for jpu-admin on this checkout
    try:
        # Block only now: the servers must not inherit a mask that ignores SIGTERM.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        print(f"JPU_NATS_URL={servers.nats_url}", flush=True)
        print(f"JPU_DATABASE_URL={servers.database_url}", flush=True)
        for key, value in servers.nats_env("admin").items():  # SPEC SEC2: NATS wants a user
            print(f"{key}={value}", flush=True)
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        discover.forget(data_dir)
        servers.stop()
    return 0


def prepare_only(demo: bool) -> int:
    """What `run` does before the services start, against the configured NATS and PostgreSQL:
    a deployment's one-shot step (compose/docker-compose.yml `prepare`). Idempotent. No demo
    users unless `--demo` (SPEC SEC3): it prints how to create the first admin instead."""
    users = asyncio.run(prepare(load_config(), demo=demo))
    if not users:
        print(FIRST_ADMIN, flush=True)
        return 0
    print("Demo users and tokens (DEMO ONLY - well-known, do not use in production):")
    print("\n".join(f"  {u.name:<10} {u.lab:<4} {u.role:<6} {u.token}" for u in users), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m jpu.stack", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run", help="NATS + PostgreSQL + all services + demo; Ctrl-C stops all")
    sub.add_parser("servers", help="only NATS + PostgreSQL; prints their URLs")
    prep = sub.add_parser("prepare", help="schema, stream, inventory and labs; then exit")
    prep.add_argument("--demo", action="store_true", help="and the demo users (DEMO ONLY)")
    args = parser.parse_args()
    setup_logging("stack")
    if args.command == "prepare":
        return prepare_only(args.demo)
    return run.main() if args.command == "run" else servers_only()


if __name__ == "__main__":
    sys.exit(main())
