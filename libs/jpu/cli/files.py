"""`jpu files ID [PATH]` and `jpu get ID PATH [-o FILE]`: the files a job wrote into its
JOB_OUTPUT_DIR (SPEC §8 `GET /v1/jobs/{id}/files`, U1).

`files` lists a directory like `ls -l` (every page of the API's listing; `--json` for scripts);
`get` downloads one file like `curl -O` (`-o FILE`, `-o -` for stdout), with `--continue` resuming
a partial local file with an HTTP Range request, like `wget -c`. The local file gets the remote
modification time, like `curl -R`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import quote

from jpu.cli.rest import subcommands as rest
from jpu.cli.rest.client import ApiError, RestClient, RestError, resolve_target
from jpu.cli.rest.render import fmt_ts, table

USER_ERRORS: tuple[type[Exception], ...] = rest.USER_ERRORS


def register(sub: Any) -> None:
    common = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    rest.add_target_options(common, defaults=False)
    for name, helptext, description, path_help in (
        (
            "files",
            "list the files a job wrote (its JOB_OUTPUT_DIR)",
            "List a directory of a job attempt's JOB_OUTPUT_DIR: name, type, size, modification "
            "time. Download a file with `jpu get ID PATH`.",
            "a directory in it (default: JOB_OUTPUT_DIR itself)",
        ),
        (
            "get",
            "download a file a job wrote",
            "Download one file of a job attempt's JOB_OUTPUT_DIR (`jpu files ID` lists them) "
            "into the current directory, or -o FILE.",
            "the file, relative to JOB_OUTPUT_DIR",
        ),
    ):
        p = sub.add_parser(name, parents=[common], help=helptext, description=description)
        p.add_argument("job_id", metavar="ID")
        nargs: dict[str, Any] = {"nargs": "?", "default": ""} if name == "files" else {}
        p.add_argument("path", metavar="PATH", help=path_help, **nargs)
        p.add_argument("--attempt", type=int, metavar="N", help="attempt N (default: the latest)")
        p.set_defaults(func=cmd_files if name == "files" else cmd_get)
    p.add_argument(  # `jpu get` only, the last one
        "-o", "--output", metavar="FILE", help="where to write it (default: its name; - stdout)"
    )
    p.add_argument(
        "-c",
        "--continue",
        dest="resume",
        action="store_true",
        help="resume a partial FILE from where it ends (an HTTP Range request)",
    )


def _url(job_id: str, path: str | None = None) -> str:
    """The API path; `.`/`..` names are escaped so that no HTTP client folds them away — the
    gateway refuses them itself, naming `path`."""
    out = f"/v1/jobs/{quote(job_id, safe='')}/files"
    if path is None:
        return out
    dots = {".": "%2E", "..": "%2E%2E"}
    return out + "/" + "/".join(dots.get(n) or quote(n, safe="") for n in path.split("/"))


def _client(args: argparse.Namespace) -> RestClient:
    return RestClient(resolve_target(args.url, args.token))


def cmd_files(args: argparse.Namespace) -> int:
    params: dict[str, Any] = {"path": args.path}
    if args.attempt is not None:
        params["attempt"] = args.attempt
    with _client(args) as c:
        body = c.get(_url(args.job_id), params)
        entries = list(body["entries"])
        while body.get("next_cursor"):  # every page: one listing
            body = c.get(_url(args.job_id), {**params, "cursor": body["next_cursor"]})
            entries += body["entries"]
    body = {**body, "entries": entries, "next_cursor": None}
    if args.json:
        print(json.dumps(body, indent=2, sort_keys=True))
        return 0
    print(listing(body))
    return 0


def listing(body: dict[str, Any]) -> str:
    """The table for people: a directory's name ends in /, a link's in @ (like `ls -F`)."""
    mark = {"dir": "/", "symlink": "@"}
    rows = [
        (e["name"] + mark.get(e["type"], ""), e["type"], e["size"], fmt_ts(e["mtime"]))
        for e in body["entries"]
    ]
    where = f"{body['job_id']} attempt {body['attempt']}: {body['path'] or '.'}"
    if not rows:
        return f"{where} is empty"
    return where + "\n" + table(["NAME", "TYPE", "SIZE", "MODIFIED"], rows)


def cmd_get(args: argparse.Namespace) -> int:
    name = args.output or Path(args.path.rstrip("/")).name
    if not name or name in (".", ".."):
        raise RestError(f"{args.path!r} names no file: give -o FILE")
    params = {} if args.attempt is None else {"attempt": args.attempt}
    to_stdout = name == "-"
    target = Path(name)
    have = target.stat().st_size if args.resume and not to_stdout and target.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    with _client(args) as c:
        try:
            with c.stream(_url(args.job_id, args.path), params, headers=headers) as r:
                resumed = r.status_code == 206  # else the whole file: written anew
                if to_stdout:
                    _copy(r.iter_bytes(), sys.stdout.buffer)
                else:
                    with target.open("ab" if resumed else "wb") as out:
                        _copy(r.iter_bytes(), out)
                size = int(r.headers.get("Jpu-File-Size", "0"))
                mtime = r.headers.get("Jpu-File-Mtime")
        except ApiError as e:
            if e.status == 416 and e.details.get("size") == have:  # it was complete already
                return _done(args, target, have, have)
            raise
    if to_stdout:
        return 0
    if mtime is not None:
        os.utime(target, (float(mtime), float(mtime)))  # like `curl -R`
    return _done(args, target, size, have if resumed else 0)


def _copy(chunks: Iterator[bytes], out: IO[bytes]) -> None:
    for chunk in chunks:
        out.write(chunk)
    out.flush()


def _done(args: argparse.Namespace, target: Path, size: int, resumed_at: int) -> int:
    got = target.stat().st_size
    if got != size:
        raise RestError(f"{target}: {got} bytes written, the file has {size}: run it again")
    if args.json:
        out = {"job_id": args.job_id, "path": args.path, "output": str(target), "size": size}
        print(json.dumps({**out, "resumed_at": resumed_at}, indent=2, sort_keys=True))
    else:
        more = f", resumed at byte {resumed_at:,}" if resumed_at else ""
        print(f"{args.path} -> {target} ({size:,} bytes{more})")
    return 0
