"""`jpu submit`, like sbatch (SPEC U1, U5, Q1–Q5).

A script file (or `-` for stdin, or `--wrap CMD`); its leading `#SBATCH` / `#JPU` directives are
read as sbatch reads them (jpu.cli.directives) and command-line flags win over them. The job runs
in the directory `jpu submit` was called from unless `--chdir`/`-D` says otherwise. It prints the
job id, and "queued (waiting for a free slot …)" only when the user's concurrency limit really
holds the job (Q5); `--json` prints the API's answer as is.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jpu.cli import directives, messages
from jpu.cli.directives import Directives
from jpu.cli.directives.sbatch import refusal
from jpu.cli.rest.client import ApiError, RestClient, RestError, resolve_target
from jpu.policy import sbatch as sbatch_policy
from jpu.policy.sbatch_options import OPTIONS
from jpu.policy.time_limits import parse_time_limit
from jpu.policy.workdir import NOT_ON_CLUSTER

_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")
_ZERO_TIME = frozenset({"0", "0:0", "00:00", "0:00:00", "00:00:00"})


class _SbatchFlag(argparse.Action):
    """An sbatch option of the table on the command line: kept as written, in order, for the
    same reader as `#SBATCH` lines (SPEC U6: the two accept the same set)."""

    def __call__(
        self, parser: Any, ns: argparse.Namespace, values: Any, option: str | None = None
    ) -> None:
        assert option is not None
        words = [option] if values in (None, []) else [f"{option}={values}"]
        if not option.startswith("--") and values not in (None, []):
            words = [option, values]  # "-c 8", as on an #SBATCH line
        ns.sbatch_words = [*getattr(ns, "sbatch_words", []), *words]


def _gpus_arg(text: str) -> int | str:
    """`-G 2` → 2; `-G rtx4090:2` stays text, for the sbatch reader (SPEC U6)."""
    return int(text) if text.isdigit() else text


def _add_sbatch_flags(s: argparse.ArgumentParser) -> None:
    """Every option of the table that `jpu submit` has no flag of its own for."""
    for o in OPTIONS:
        names = [n for n in o.names if n not in s._option_string_actions]
        if names:
            s.add_argument(
                *names,
                action=_SbatchFlag,
                nargs=0 if o.value != "required" else None,
                dest="sbatch_words",
                metavar="V",
                help=f"sbatch's ({o.cls}): {o.meaning}".replace("%", "%%"),
            )
    s.set_defaults(sbatch_words=[])


def add_parser(sub: Any, common: list[argparse.ArgumentParser]) -> None:
    s = sub.add_parser(
        "submit",
        aliases=["sbatch"],  # SPEC U6: the same options as an #SBATCH line, under sbatch's name
        parents=common,
        help="submit a job (like sbatch)",
        description="Submit a script (like sbatch). Its leading #SBATCH / #JPU lines are read "
        "and every sbatch option is taken here too (docs/sbatch.md: honoured, accepted with a "
        "warning, or refused); flags given here win over them. Prints the job id "
        "(--parsable: the id alone, for scripts).",
        refused=refusal,  # e.g. --uid here is refused as `#SBATCH --uid` is (U6)
    )
    s.add_argument("script", nargs="?", help="script file to run ('-' reads stdin)")
    s.add_argument("--wrap", help="run this command line instead of a script file")
    s.add_argument(
        "--gpus", "-G", type=_gpus_arg, help="number of GPUs (1-8; default 1), or TYPE:N as sbatch"
    )
    s.add_argument("--tier", action="append", default=[], help="allowed tier (repeatable)")
    s.add_argument("--time", "-t", help="time limit: minutes, MM:SS, HH:MM:SS, D-HH:MM:SS")
    s.add_argument("--name", "-J", "--job-name", help="job name (default: the script's name)")
    s.add_argument("--env", action="append", default=[], metavar="K=V", help="job env variable")
    s.add_argument("--min-vram", type=int, metavar="GB", help="minimum GPU memory in GB")
    s.add_argument(
        "--array",
        "-a",
        metavar="SPEC",
        help='a job array: "0-99", "0-99:2", "1,5,9", "%%N" caps tasks at once (Slurm\'s)',
    )
    s.add_argument("--parsable", action="store_true", help="print the job id alone (sbatch's)")
    s.add_argument("--idempotency-key", help="resubmitting with the same key returns the job")
    s.add_argument(
        "--chdir",
        "-D",
        metavar="DIR",
        help="directory the job runs in (default: the current one, like sbatch)",
    )
    s.add_argument(
        "--mail-type",
        metavar="KINDS",
        help="notify on BEGIN,END,FAIL,REQUEUE (an OOM retry), ALL or NONE, like sbatch "
        "(default: your `jpu notify` settings); add ARRAY_TASKS for a notification per task "
        "of an array (default: once per array)",
    )
    s.add_argument("--mail-user", metavar="ADDRESS", help="e-mail address for this job")
    s.add_argument(
        "--dependency",
        "-d",
        metavar="DEP",
        help="start after other jobs (Slurm syntax: afterok|afternotok|afterany|after:ID"
        "[:ID...], joined by ','; or singleton)",
    )
    s.add_argument(
        "--hold",
        "-H",
        action="store_true",
        help="submit held: runs after `jpu release ID`",
    )
    s.add_argument(
        "--workspace",
        metavar="NAME",
        help="run in this READY workspace (own, else the lab's; default: env JPU_WORKSPACE)",
    )
    _add_sbatch_flags(s)
    s.set_defaults(func=cmd_submit)


def parse_env(pairs: list[str]) -> dict[str, str]:
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise RestError(f"--env {pair!r}: use KEY=VALUE")
        env[key] = value
    return env


def _script(args: argparse.Namespace, stdin: Any) -> tuple[str, str, str | None]:
    """(command, default name, source for directive messages; None for --wrap)."""
    if (args.script is None) == (args.wrap is None):
        raise RestError("give a script file or --wrap COMMAND (one of them)")
    if args.wrap is not None:
        return args.wrap, "wrap", None  # like sbatch --wrap: no directives
    if args.script == "-":
        return (stdin or sys.stdin).read(), "stdin", "stdin"
    path = Path(args.script)
    return path.read_text(), _NAME_BAD.sub("_", path.name)[:128] or "script", path.name


def _what(args: argparse.Namespace) -> str:
    """The script as the user gave it, for messages."""
    if args.wrap is not None:
        return "--wrap"
    return "stdin" if args.script == "-" else Path(args.script).name


def request(args: argparse.Namespace, stdin: Any = None) -> tuple[dict[str, Any], Directives]:
    """The POST /v1/jobs body from sbatch-like arguments and the script's directives
    (command line first, then #JPU, then #SBATCH), and those directives. The sbatch options go
    as given (`sbatch`, each with its line): what they mean, warn or refuse is intake's to
    decide (SPEC U6, jpu.domain.submission.with_sbatch), for this client as for any other."""
    command, default_name, source = _script(args, stdin)
    words = list(getattr(args, "sbatch_words", []))
    if isinstance(args.gpus, str):  # `-G rtx4090:2`: sbatch's TYPE:N, read as on a line
        words, args.gpus = [*words, f"--gpus={args.gpus}"], None
    try:
        d = directives.parse(command if source else "", source or "command line", words)
    except directives.DirectiveError as e:
        raise RestError("\n".join(e.problems)) from e
    body: dict[str, Any] = {
        # sbatch takes any name; the platform's are [A-Za-z0-9._-] (Q1): the rest becomes '_'
        "name": _NAME_BAD.sub("_", args.name or d.name or default_name)[:128] or default_name,
        "command": command,
        "num_gpus": args.gpus
        if args.gpus is not None
        else sbatch_policy.gpus_asked(d.raw, d.gpus or 1),  # U6: --gpus-per-task × -n
    }
    # named tiers (--tier, #JPU --tier); a GPU type (--gres=gpu:TYPE:N) is among `sbatch`
    tiers = [t.strip() for arg in args.tier for t in arg.split(",") if t.strip()]
    if tiers or d.named_tiers:
        body["tiers"] = tiers or d.named_tiers
    min_vram = args.min_vram if args.min_vram is not None else d.min_vram_gb
    if min_vram is not None:
        body["min_vram_gb"] = min_vram
    limit = d.time_limit_s
    if args.time is not None and args.time.strip() in _ZERO_TIME:  # U6: the site's maximum
        limit = None
    elif args.time is not None:
        try:
            limit = parse_time_limit(args.time)
        except ValueError as e:
            raise RestError(str(e)) from e
    if limit is not None:
        body["time_limit_s"] = limit
    given = list(d.given)
    if args.mail_user:  # Q10: the line intake names if the site sends no e-mail
        given.append(("--mail-user", args.mail_user, f"command line: --mail-user={args.mail_user}"))
    if given:
        body["sbatch"] = {
            "source": source or "command line",
            "options": [{"option": o, "value": v, "source_line": line} for o, v, line in given],
        }
    # --export's bare VAR takes its value here, at submit, as sbatch does (intake sets the rest)
    exported = sbatch_policy.export(d.raw["export"][0], os.environ)[0] if "export" in d.raw else {}
    env = {**exported, **d.env, **parse_env(args.env)}
    if env:
        body["env"] = env
    body["chdir"] = os.path.abspath(args.chdir or d.chdir or os.getcwd())  # U5: the submit dir
    mail_type = args.mail_type if args.mail_type is not None else d.mail_type  # Q10
    if mail_type is not None:
        body["mail_type"] = mail_type  # the server checks a flag's value (422 names the field)
    mail_user = args.mail_user or d.mail_user
    if mail_user is not None:
        body["mail_user"] = mail_user
    dependency = getattr(args, "dependency", None) or d.dependency  # Q8
    if dependency:
        body["dependency"] = dependency
    if getattr(args, "hold", False) or d.hold:  # Q9
        body["hold"] = True
    workspace = getattr(args, "workspace", None) or d.workspace or os.environ.get("JPU_WORKSPACE")
    if workspace:  # X4a: the flag, then #JPU --workspace, then the user's default
        body["workspace"] = workspace
    array = getattr(args, "array", None) or d.array  # Q7
    if array:
        body["array"] = array
    return body, d


def submit_body(args: argparse.Namespace, stdin: Any = None) -> dict[str, Any]:
    return request(args, stdin)[0]


def sbatch_refusal(e: ApiError) -> RestError | None:
    """Intake's U6 refusal (422 naming `sbatch`): each line's problem, one per line, as a
    script's directives are refused (SPEC U6: the line, the option and the fix)."""
    problems = e.details.get("problems") if e.details.get("field") == "sbatch" else None
    if not isinstance(problems, list) or not problems:
        return None
    return RestError("\n".join(map(str, problems)))


def cmd_submit(args: argparse.Namespace) -> int:
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    with RestClient(resolve_target(args.url, args.token)) as c:
        body, d = request(args)
        try:
            job = _post_submit(c, body, headers, implicit_chdir=not (args.chdir or d.chdir))
        except ApiError as e:  # said in submit's flags; the script by its name and size
            if (refused := sbatch_refusal(e)) is not None:
                raise refused from e
            said = messages.api_error(e.code, e.message, e.details, submit=True)
            e.args = (messages.name_script(said, _what(args), body["command"]),)
            raise
        warnings = job.get("warnings", [])
        for w in warnings:  # SPEC U6, as intake decided: one line per option, kept on the job
            if w.get("field") == "sbatch":
                print(f"jpu submit: warning: {w['message']}", file=sys.stderr)
        if d.ignored:
            lines = ", ".join(map(str, d.ignored))
            print(
                f"jpu submit: warning: {args.script} line(s) {lines}: #SBATCH/#JPU after the "
                "first command are ignored, as sbatch ignores them (move them to the top)",
                file=sys.stderr,
            )
        for w in warnings:  # U5: accepted, but e.g. its chdir is read-only to it
            if w.get("field") != "sbatch":
                print(f"jpu submit: warning: {w['message']}", file=sys.stderr)
        if args.json:
            print(json.dumps(job, indent=2, sort_keys=True))
            return 0
        if args.parsable:  # like sbatch --parsable: `ID=$(jpu submit --parsable run.sh)`
            print(job["id"])
            return 0
        if job.get("array_id"):  # Q7: one line for the array, not one per task
            print(messages.array_submitted(job))
        else:
            print(messages.submitted(*_held_check(c, job)))
    return 0


def _post_submit(
    c: RestClient, body: dict[str, Any], headers: Any, *, implicit_chdir: bool
) -> dict[str, Any]:
    """POST the job. U5: when the directory `jpu submit` ran in was only the default (no
    --chdir, no #SBATCH --chdir) and the cluster has no such directory (a laptop's folder:
    jpu.policy.workdir NOT_ON_CLUSTER, refused before anything was appended), the job is
    submitted with no chdir — it runs in its own output directory — and the user is told."""
    try:
        job: dict[str, Any] = c.post("/v1/jobs", body, headers)
        return job
    except ApiError as e:
        if not implicit_chdir or e.details.get("reason") != NOT_ON_CLUSTER:
            raise
        where = body.pop("chdir")
    job = c.post("/v1/jobs", body, headers)
    workdir = job.get("workdir") or f"its output directory (jpu show {job.get('id')})"
    print(
        f"jpu submit: note: {where} is not on the cluster, so the job runs in {workdir}; "
        "give --chdir DIR to run it in a directory of the cluster",
        file=sys.stderr,
    )
    return job


def _held_check(c: RestClient, job: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The caller's slots (`GET /v1/me`), then the job as it is now: a job still in its
    personal queue after all the slots were seen taken is held by the limit (Q5); one promoted
    meanwhile was only on its way."""
    if job.get("state") != "PERSONAL_QUEUE_WAIT":
        return job, None
    me = c.get("/v1/me")
    now = c.get(f"/v1/jobs/{quote(str(job['id']), safe='')}")
    return now, me
