"""`jpu submit|queue|show|events|cancel|usage|pool|admin` over the REST API (SPEC U1, §8).

In the habits of Slurm users: `submit` reads a script file (or `--wrap`) like sbatch, `queue` looks
like squeue. Tables for people, `--json` for scripts (the API's body as is), and on an error one
line with the API's code and message and a non-zero exit.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jpu.cli.rest_views as views
from jpu.cli.rest_client import ApiError, RestClient, RestError, resolve_target
from jpu.cli.rest_render import parse_time_limit

USER_ERRORS: tuple[type[Exception], ...] = (RestError, ApiError, OSError)
_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--url", help="API base URL (env JPU_URL; default http://127.0.0.1:8080)")
    p.add_argument("--token", help="API token (env JPU_TOKEN, or ~/.config/jpu/config.toml)")
    p.add_argument("--json", action="store_true", help="print the API's JSON (for scripts)")
    return p


def register(sub: Any) -> None:
    common = [_common()]
    s = sub.add_parser("submit", parents=common, help="submit a job (like sbatch)")
    s.add_argument("script", nargs="?", help="script file to run ('-' reads stdin)")
    s.add_argument("--wrap", help="run this command line instead of a script file")
    s.add_argument("--gpus", "-G", type=int, default=1, help="number of GPUs (1-8)")
    s.add_argument("--tier", action="append", default=[], help="allowed tier (repeatable)")
    s.add_argument("--time", "-t", help="time limit: minutes, MM:SS, HH:MM:SS, D-HH:MM:SS")
    s.add_argument("--name", "-J", help="job name (default: the script's name, or 'wrap')")
    s.add_argument("--env", action="append", default=[], metavar="K=V", help="job env variable")
    s.add_argument("--min-vram", type=int, metavar="GB", help="minimum GPU memory in GB")
    s.add_argument("--idempotency-key", help="resubmitting with the same key returns the job")
    s.set_defaults(func=cmd_submit)
    for name, helptext, func in (
        ("queue", "the global queue by rank (like squeue)", cmd_queue),
        ("usage", "fair-share usage per lab", cmd_usage),
        ("pool", "the GPU pool by placement", cmd_pool),
    ):
        p = sub.add_parser(name, parents=common, help=helptext)
        if name == "usage":
            p.add_argument("lab", nargs="?", help="one lab only")
        p.set_defaults(func=func)
    for name, helptext, func in (
        ("show", "one job", cmd_show),
        ("events", "a job's events (its audit trail)", cmd_events),
        ("cancel", "cancel a job", cmd_cancel),
    ):
        p = sub.add_parser(name, parents=common, help=helptext)
        p.add_argument("job_id", metavar="ID")
        p.set_defaults(func=func)
    admin = sub.add_parser("admin", help="administration").add_subparsers(
        dest="admin_command", required=True, metavar="WHAT"
    )
    m = admin.add_parser("maintenance", parents=common, help="maintenance mode (SPEC §7)")
    m.add_argument("action", choices=["start", "end", "status"])
    m.add_argument("--message", "-m", default="", help="shown to users during maintenance")
    m.set_defaults(func=cmd_maintenance)


# --- building the request ------------------------------------------------------------------


def parse_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise RestError(f"--env {pair!r}: use KEY=VALUE")
        env[key] = value
    return env


def submit_body(args: argparse.Namespace, stdin: Any = None) -> dict[str, Any]:
    """The POST /v1/jobs body from sbatch-like arguments."""
    if (args.script is None) == (args.wrap is None):
        raise RestError("give a script file or --wrap COMMAND (one of them)")
    if args.wrap is not None:
        command, default_name = args.wrap, "wrap"
    elif args.script == "-":
        command, default_name = (stdin or sys.stdin).read(), "stdin"
    else:
        path = Path(args.script)
        command, default_name = path.read_text(), _NAME_BAD.sub("_", path.name)[:128] or "script"
    body: dict[str, Any] = {
        "name": args.name or default_name,
        "command": command,
        "num_gpus": args.gpus,
    }
    tiers = [t.strip() for arg in args.tier for t in arg.split(",") if t.strip()]
    if tiers:
        body["tiers"] = tiers
    if args.min_vram is not None:
        body["min_vram_gb"] = args.min_vram
    if args.time is not None:
        try:
            limit = parse_time_limit(args.time)
        except ValueError as e:
            raise RestError(str(e)) from e
        if limit is not None:
            body["time_limit_s"] = limit
    env = parse_env(args.env)
    if env:
        body["env"] = env
    return body


# --- commands ------------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> RestClient:
    return RestClient(resolve_target(args.url, args.token))


def _emit(args: argparse.Namespace, data: Any, render: Callable[[Any], str]) -> int:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else render(data))
    return 0


def cmd_submit(args: argparse.Namespace) -> int:
    body = submit_body(args)
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    with _client(args) as c:
        return _emit(args, c.post("/v1/jobs", body, headers), views.submitted)


def cmd_queue(args: argparse.Namespace) -> int:
    with _client(args) as c:
        return _emit(args, c.get("/v1/queue"), views.queue)


def cmd_show(args: argparse.Namespace) -> int:
    with _client(args) as c:
        return _emit(args, c.get(f"/v1/jobs/{quote(args.job_id, safe='')}"), views.job)


def cmd_events(args: argparse.Namespace) -> int:
    with _client(args) as c:
        return _emit(args, c.get(f"/v1/jobs/{quote(args.job_id, safe='')}/events"), views.events)


def cmd_cancel(args: argparse.Namespace) -> int:
    with _client(args) as c:
        path = f"/v1/jobs/{quote(args.job_id, safe='')}/cancel"
        return _emit(args, c.post(path, {}), views.cancelled)


def cmd_usage(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.lab:
            return _emit(args, c.get(f"/v1/labs/{quote(args.lab, safe='')}"), views.one_lab)
        return _emit(args, c.get("/v1/labs"), views.labs)


def cmd_pool(args: argparse.Namespace) -> int:
    with _client(args) as c:
        return _emit(args, c.get("/v1/placements"), views.pool)


def cmd_maintenance(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.action == "status":
            return _emit(args, c.get("/v1/maintenance/status"), views.maintenance)
        body = {"action": args.action, "message": args.message}
        return _emit(args, c.post("/v1/admin/maintenance", body), views.maintenance)
