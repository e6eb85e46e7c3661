"""`jpu submit|queue|jobs|history|show|events|logs|cancel|hold|release|usage|pool|whoami|tiers|
sinfo|admin` over the REST API (SPEC U1, U5; `hold`/`release`: Q9). Wherever an id is taken, any
unique prefix of it will do (the API resolves it, as git does).

In the habits of Slurm users: `submit` reads a script file (or `--wrap`) and its `#SBATCH` lines
like sbatch and, like sbatch, the job runs in the directory it was submitted from
(`--chdir`/`-D` for another; jpu.cli.rest.submit); `queue` looks like squeue and `jobs` /
`history` like sacct (jpu.cli.rest.lists); `logs` prints an attempt's output as it is (raw
bytes), following it with `-f` like `tail -f`. Tables for people, `--json` for scripts (the
API's body as is), and on an error one line with the API's code and message — and what the
details add: the limit, the valid values (jpu.cli.messages) — and a non-zero exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any
from urllib.parse import quote

import jpu.cli.rest.views as views
from jpu.cli.rest import cancel, info, lists, notify, submit, workspaces
from jpu.cli.rest.client import ApiError, RestClient, RestError, StreamBroken, resolve_target
from jpu.cli.rest.ids import expand_ids, one_id
from jpu.cli.rest.submit import parse_env as parse_env  # re-exported (tests, older callers)
from jpu.cli.rest.submit import submit_body as submit_body

_IDS_HELP = "the job id, or any unique prefix of it; ID_K: task K of an array (SPEC U8)"
USER_ERRORS: tuple[type[Exception], ...] = (RestError, ApiError, OSError)


def add_target_options(p: argparse.ArgumentParser, *, defaults: bool) -> None:
    """`--url`, `--token`, `--json`: on `jpu` itself (`defaults`) and on every API subcommand
    (no defaults there, so `jpu --json queue` and `jpu queue --json` both work)."""
    d: dict[str, Any] = {} if defaults else {"default": argparse.SUPPRESS}
    p.add_argument("--url", help="API base URL (env JPU_URL; default http://127.0.0.1:8080)", **d)
    p.add_argument("--token", help="API token (env JPU_TOKEN, or ~/.config/jpu/config.toml)", **d)
    p.add_argument("--json", action="store_true", help="print the API's JSON (for scripts)", **d)


def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_target_options(p, defaults=False)
    return p


def register(sub: Any) -> None:
    common = [_common()]
    submit.add_parser(sub, common)
    lists.add_parsers(sub, common)
    info.add_parsers(sub, common)
    cancel.add_parser(sub, common)
    notify.add_parser(sub, common)  # Q10
    workspaces.add_parsers(sub, common)  # X4a
    for name, helptext, func in (
        ("usage", "fair-share usage per lab", cmd_usage),
        ("pool", "the GPU pool by placement", cmd_pool),
    ):
        p = sub.add_parser(name, parents=common, help=helptext)
        if name == "usage":
            p.add_argument("lab", nargs="?", help="one lab only")
            p.add_argument(
                "--explain",
                action="store_true",
                help="every charge that makes up a lab's usage (your lab unless LAB is given; "
                "members see their own lab's, admins every lab's)",
            )
            p.add_argument("--since", metavar="T", help="with --explain: charges at or after T")
            p.add_argument("--until", metavar="T", help="with --explain: charges before T")
        p.set_defaults(func=func)
    for name, helptext, func in (
        ("show", "one job", cmd_show),
        ("events", "a job's events (its audit trail)", cmd_events),
        ("hold", "hold jobs waiting in your queue (they are not started until released)", cmd_hold),
        ("release", "release held jobs", cmd_release),
    ):
        p = sub.add_parser(name, parents=common, help=helptext, description=helptext)
        if name in ("hold", "release"):  # U8: several, and task ranges, as scontrol takes
            p.add_argument("job_id", metavar="ID", nargs="+", help=_IDS_HELP + "; ID_[2-4,7]")
        else:
            p.add_argument("job_id", metavar="ID", help=_IDS_HELP)
        p.set_defaults(func=func)
    lg = sub.add_parser("logs", parents=common, help="a job's output (stdout, or --stderr)")
    lg.add_argument("job_id", metavar="ID", help=_IDS_HELP)
    lg.add_argument("--attempt", type=int, metavar="N", help="attempt N (default: the latest)")
    lg.add_argument(
        "--follow", "-f", action="store_true", help="keep printing until the attempt ends"
    )
    lg.add_argument("--stderr", action="store_true", help="the attempt's stderr, not its stdout")
    lg.set_defaults(func=cmd_logs)
    admin = sub.add_parser("admin", help="administration").add_subparsers(
        dest="admin_command", required=True, metavar="WHAT"
    )
    m = admin.add_parser("maintenance", parents=common, help="maintenance mode (SPEC §7)")
    m.add_argument("action", choices=["start", "end", "status"])
    m.add_argument("--message", "-m", default="", help="shown to users during maintenance")
    m.set_defaults(func=cmd_maintenance)


# --- commands ------------------------------------------------------------------------------


def _client(args: argparse.Namespace) -> RestClient:
    return RestClient(resolve_target(args.url, args.token))


def _emit(args: argparse.Namespace, data: Any, render: Callable[[Any], str]) -> int:
    print(json.dumps(data, indent=2, sort_keys=True) if args.json else render(data))
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    with _client(args) as c:
        job_id = one_id(args.job_id)
        return _emit(args, c.get(f"/v1/jobs/{quote(job_id, safe='')}"), views.job)


def cmd_events(args: argparse.Namespace) -> int:
    with _client(args) as c:
        path = f"/v1/jobs/{quote(one_id(args.job_id), safe='')}/events"
        return _emit(args, c.get(path), views.events)


FOLLOW_RETRIES = 5  # a follow whose connection broke (a gateway restarted) resumes this often


def cmd_logs(args: argparse.Namespace, out: IO[bytes] | None = None) -> int:
    """The attempt's output as raw bytes on stdout (SPEC U5). `--follow` streams until the
    attempt ends; a broken connection resumes at the byte where it broke, on the same attempt."""
    if args.json and args.follow:
        raise RestError("--json prints one answer: use it without --follow")
    out = out or sys.stdout.buffer
    path = f"/v1/jobs/{quote(one_id(args.job_id), safe='')}/logs"
    params: dict[str, Any] = {"stream": "stderr" if args.stderr else "stdout"}
    if args.attempt is not None:
        params["attempt"] = args.attempt
    with _client(args) as c:
        if args.json:
            with c.stream(path, params) as r:
                data = r.read()
            return _emit(args, views.logs_json(args.job_id, r.headers, data), str)
        if not args.follow:
            try:
                return _copy_log(c, path, params, out)
            except ApiError as e:  # Q7: an array's id: every task's output, each headed
                if "tasks" not in e.details:
                    raise
                for task in e.details["tasks"]:
                    if not _write(out, f"==> {task} <==\n".encode()):
                        return 0
                    try:
                        _copy_log(c, f"/v1/jobs/{quote(task, safe='')}/logs", params, out)
                    except ApiError as none:  # e.g. not started yet: say so, go on
                        _write(out, f"({none.message})\n".encode())
                return 0
        params["follow"] = "true"
        sent, broken = 0, 0
        while True:
            try:
                with c.stream(path, {**params, "offset": sent}, follow=True) as r:
                    params["attempt"] = r.headers.get("Jpu-Log-Attempt", params.get("attempt"))
                    for chunk in r.iter_bytes():
                        if not _write(out, chunk):
                            break
                        sent, broken = sent + len(chunk), 0
                return 0
            except StreamBroken:
                broken += 1
                if broken > FOLLOW_RETRIES:
                    raise
                time.sleep(min(0.5 * 2**broken, 8.0))


def _copy_log(c: RestClient, path: str, params: dict[str, Any], out: IO[bytes]) -> int:
    with c.stream(path, params) as r:
        for chunk in r.iter_bytes():
            if not _write(out, chunk):
                break
    return 0


def _write(out: IO[bytes], chunk: bytes) -> bool:
    """Write and flush; False when the reader went away (`| head`): the command ends quietly."""
    try:
        out.write(chunk)
        out.flush()
    except BrokenPipeError:
        silence_stdout()
        return False
    return True


def silence_stdout() -> None:
    """The reader of stdout went away: what is left in the buffer goes to /dev/null, so Python
    does not report a second BrokenPipeError when it flushes stdout at exit."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def cmd_hold(args: argparse.Namespace) -> int:
    """SPEC Q9: only while the job waits in the personal queue (else 409 NOT_IN_PERSONAL_QUEUE)."""
    return _hold_each(args, "hold")


def cmd_release(args: argparse.Namespace) -> int:
    return _hold_each(args, "release")


def _hold_each(args: argparse.Namespace, action: str) -> int:
    """Each id (U8: a prefix, `ID_K`, `ID_[2-4,7]`): one POST each; one that fails is said and
    the others still done (as scontrol does), exit 1 if any failed."""
    ids = expand_ids(args.job_id, ranges=True)
    if len(ids) == 1:  # one job: the API's answer, its error as is
        with _client(args) as c:
            return _emit(
                args, c.post(f"/v1/jobs/{quote(ids[0], safe='')}/{action}", {}), views.held
            )
    done, failed = [], 0
    with _client(args) as c:
        for job_id in ids:
            try:
                done.append(c.post(f"/v1/jobs/{quote(job_id, safe='')}/{action}", {}))
            except ApiError as e:
                print(f"jpu {action}: error: {job_id}: {e}", file=sys.stderr)
                failed += 1
    if args.json:
        print(json.dumps(done, indent=2, sort_keys=True))
    else:
        for job in done:
            print(views.held(job))
    return 1 if failed else 0


def cmd_usage(args: argparse.Namespace) -> int:
    if args.explain:
        return _explain_usage(args)
    if args.since is not None or args.until is not None:
        raise RestError("--since and --until go with --explain")
    with _client(args) as c:
        if args.lab:
            return _emit(args, c.get(f"/v1/labs/{quote(args.lab, safe='')}"), views.one_lab)
        return _emit(args, c.get("/v1/labs"), views.labs)


def _explain_usage(args: argparse.Namespace) -> int:
    """`jpu usage --explain [LAB]`: the lab's charges as `jpu-admin explain-usage` prints them
    (one renderer, one explanation: GET /v1/labs/{lab}/usage/explain answers with
    jpu.explain.usage). Times: epoch seconds or ISO 8601, like jpu-admin's."""
    from jpu.tools.admin_usage import when  # not on every CLI start

    params: dict[str, Any] = {}
    try:
        for key in ("since", "until"):
            if getattr(args, key) is not None:
                params[key] = when(getattr(args, key))
    except argparse.ArgumentTypeError as e:
        raise RestError(str(e)) from e
    with _client(args) as c:
        lab = args.lab or c.get("/v1/me")["lab"]
        data = c.get(f"/v1/labs/{quote(lab, safe='')}/usage/explain", params or None)
    return _emit(args, data, views.usage_explanation)


def cmd_pool(args: argparse.Namespace) -> int:
    with _client(args) as c:
        placements, notice = c.get("/v1/placements"), lists.maintenance_notice(c, args)
    if notice:  # M1: draining or active, first, as `jpu queue` says it
        print(notice)
    return _emit(args, placements, views.pool)


def cmd_maintenance(args: argparse.Namespace) -> int:
    with _client(args) as c:
        if args.action == "status":
            return _emit(args, c.get("/v1/maintenance/status"), views.maintenance)
        body = {"action": args.action, "message": args.message}
        return _emit(args, c.post("/v1/admin/maintenance", body), views.maintenance)
