"""`jpu workspace build|list|show|logs|rm` (SPEC X4a) over `/v1/workspaces`.

A workspace is built on the platform's base image from a `requirements.txt` (`-r`), a
conda-style `environment.yml` (`-e`: its pip section and plain dependencies) or a Containerfile
(`-f`: one stage, `FROM` the platform's base image, no COPY/ADD), the only time the
network is allowed; a job runs in it with `jpu submit --workspace NAME` (or `#JPU --workspace`,
or the user's default: `jpu workspace default NAME`, kept by the platform; JPU_WORKSPACE is the
CLI's own). `--lab` builds the lab's shared one (lab admins).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jpu.cli.rest.client import RestClient, RestError, resolve_target


def add_parsers(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    ws = sub.add_parser(
        "workspace", help="workspaces: environments jobs run in (build, list, show, logs, rm)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    verbs = ws.add_subparsers(dest="workspace_command", required=True, metavar="VERB")
    b = verbs.add_parser("build", parents=common, help="build (or rebuild) a workspace")
    b.add_argument("name", metavar="NAME", help="[a-z0-9_.-], up to 64")
    src = b.add_mutually_exclusive_group()
    src.add_argument("-r", "--requirements", metavar="FILE", help="a requirements.txt")
    src.add_argument("-e", "--environment", metavar="FILE", help="a conda-style environment.yml")
    src.add_argument(
        "-f", "--containerfile", metavar="FILE", help="a Containerfile FROM the base image"
    )
    b.add_argument("--lab", action="store_true", help="the lab's shared workspace (lab admins)")
    b.add_argument("--rebuild", action="store_true", help="build an existing one again")
    b.add_argument("--wait", action="store_true", help="wait until READY or FAILED")
    b.set_defaults(func=cmd_build)
    d = verbs.add_parser(
        "default", parents=common, help="your default workspace: jobs naming none run in it"
    )
    d.add_argument("name", metavar="NAME", nargs="?", help="set it (own, else the lab's)")
    d.add_argument("--clear", action="store_true", help="jobs naming none use the base image")
    d.set_defaults(func=cmd_default)
    ls = verbs.add_parser("list", parents=common, help="own and the lab's workspaces")
    ls.set_defaults(func=cmd_list)
    for verb, helptext, func in (
        ("show", "one workspace: state, reason, image, size", cmd_show),
        ("logs", "its last build's log", cmd_logs),
        ("rm", "delete it (jobs naming it are refused from then on)", cmd_rm),
    ):
        p = verbs.add_parser(verb, parents=common, help=helptext)
        p.add_argument("name", metavar="NAME")
        p.add_argument("--lab", action="store_true", help="the lab's, not your own")
        p.set_defaults(func=func)


def _client(args: argparse.Namespace) -> RestClient:
    return RestClient(resolve_target(args.url, args.token))


def _path(args: argparse.Namespace, tail: str = "") -> str:
    return f"/v1/workspaces/{quote(args.name, safe='')}{tail}"


def _scope(args: argparse.Namespace) -> dict[str, str] | None:
    return {"scope": "lab"} if args.lab else None


def render(ws: dict[str, Any]) -> str:
    size = f"{ws['size'] / 2**20:.0f} MiB" if ws.get("size") else "-"
    made = time.strftime("%Y-%m-%d %H:%M", time.localtime(ws["created_at"])) if ws.get(
        "created_at"
    ) else "-"  # fmt: skip
    rows = [("Name", ws["name"]), ("Scope", f"{ws['scope']} ({ws['user']}, {ws['lab']})"),
            ("State", ws["state"]), ("Reason", ws.get("reason") or "-"),
            ("Build", ws["build"]), ("Image", ws.get("image") or "-"), ("Size", size),
            ("Created", made)]  # fmt: skip
    return "\n".join(f"{k:>8}: {v}" for k, v in rows)


def _emit(args: argparse.Namespace, data: Any, text: str) -> int:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else text)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.rebuild:
            ws = c.post(_path(args, "/rebuild") + ("?scope=lab" if args.lab else ""), {})
        else:
            given = [(k, f) for k in ("requirements", "environment", "containerfile")
                     if (f := getattr(args, k))]  # fmt: skip
            if not given:
                raise RestError("give -r requirements.txt, -e environment.yml or -f Containerfile")
            key, file = given[0]
            body = {"name": args.name, key: Path(file).read_text()}
            if args.lab:
                body["scope"] = "lab"
            ws = c.post("/v1/workspaces", body)
        while args.wait and ws["state"] == "BUILDING":
            time.sleep(2)
            ws = c.get(_path(args), _scope(args))
    code = 1 if ws["state"] == "FAILED" else 0
    _emit(args, ws, render(ws) + ("\n(see: jpu workspace logs NAME)" if code else ""))
    return code


def cmd_default(args: argparse.Namespace) -> int:
    """Show, set or clear the user's default workspace (server-side: GET/PUT /v1/me/workspace)."""
    if args.name and args.clear:
        raise RestError("give NAME or --clear, not both")
    with _client(args) as c:
        if args.name or args.clear:
            data = c.put("/v1/me/workspace", {"workspace": None if args.clear else args.name})
        else:
            data = c.get("/v1/me/workspace")
    name = data["workspace"]
    return _emit(args, data, f"default workspace: {name}" if name else "no default workspace")


def cmd_list(args: argparse.Namespace) -> int:
    with _client(args) as c:
        data = c.get("/v1/workspaces")
    lines = [f"{'NAME':<24} {'SCOPE':<5} {'OWNER':<16} {'STATE':<9} {'SIZE':>9}"]
    for w in data["workspaces"]:
        size = f"{w['size'] / 2**20:.0f}M" if w.get("size") else "-"
        owner = w["lab"] if w["scope"] == "lab" else w["user"]
        lines.append(f"{w['name']:<24} {w['scope']:<5} {owner:<16} {w['state']:<9} {size:>9}")
    return _emit(args, data, "\n".join(lines))


def cmd_show(args: argparse.Namespace) -> int:
    with _client(args) as c:
        ws = c.get(_path(args), _scope(args))
    return _emit(args, ws, render(ws))


def cmd_logs(args: argparse.Namespace) -> int:
    with _client(args) as c, c.stream(_path(args, "/log"), _scope(args)) as r:
        text = r.read().decode(errors="replace")
    if args.json:
        return _emit(args, {"name": args.name, "log": text}, "")
    sys.stdout.write(text)
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    with _client(args) as c:
        out = c.delete(_path(args), _scope(args))
    return _emit(args, out, f"deleted workspace {args.name}")
