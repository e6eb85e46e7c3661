"""One-line messages that say the fix (SPEC U1, §8): API refusals with their details, and what a
submission became. Pure: bodies and details in, text out.

A refusal names the field, the limit and the valid values when the API gives them:
`NO_FIT_PLACEMENT` says how many GPUs the largest placement has, `SERVICE_MAINTENANCE` carries
the admin's message, `UNAUTHENTICATED` says where the token comes from.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

TOKEN_HELP: Final = (
    "set JPU_TOKEN (or --token, or `token = ...` in ~/.config/jpu/config.toml) to your API "
    "token; an admin creates one with `jpu-admin token create USER`"
)


def _no_fit(details: Mapping[str, Any]) -> str:
    largest = details.get("largest_placement")
    if isinstance(largest, Mapping) and largest.get("gpus"):
        n = largest["gpus"]
        where = f"{largest.get('tier')} on {largest.get('node')}"
        return (
            f"; the largest placement that can run it has {n} GPU{'s' if n != 1 else ''} "
            f"({where}; a job runs inside one placement, SPEC P3): ask for --gpus {n} or fewer"
        )
    wanted = []
    if details.get("tiers"):
        wanted.append(f"tier {', '.join(map(str, details['tiers']))}")
    if details.get("min_vram_gb"):
        wanted.append(f"at least {details['min_vram_gb']} GB of GPU memory")
    if not wanted:
        return ""
    return f"; no active placement has {' and '.join(wanted)} (`jpu pool` lists them)"


# The API's field → what the user typed (`jpu submit`'s flag, sbatch's name), so a refusal
# speaks the user's flags and units, not the request body's (SPEC U1: `--time`, not
# `time_limit_s` in seconds; the script, not `command`).
FLAGS: Final[Mapping[str, str]] = {
    "time_limit_s": "--time",
    "num_gpus": "--gpus",
    "tiers": "--tier",
    "min_vram_gb": "--min-vram",
    "name": "--job-name",
    "env": "--env",
    "chdir": "--chdir",
    "mail_type": "--mail-type",
    "mail_user": "--mail-user",
    "workspace": "--workspace",
    "dependency": "--dependency",
    "array": "--array",
    "output": "--output",
    "error": "--error",
    "open_mode": "--open-mode",
    "signal": "--signal",
    "command": "the script",
}
_SECONDS: Final = re.compile(r"(?<![\w.:-])(\d+)(?![\w.:-])")


def _slurm_time(seconds: int) -> str:
    """sbatch's --time form: [D-]HH:MM:SS."""
    days, s = divmod(seconds, 86400)
    out = f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{days}-{out}" if days else out


# Fields only a job has: named so by any command's refusal. The rest (`name`, `env`...) are
# flags only for `jpu submit` (a workspace has a `name` too): see api_error's `submit`.
_JOB_ONLY: Final = frozenset({"time_limit_s", "command"})


def user_terms(field: str, message: str, submit: bool = False) -> str:
    """`field: message` as the user wrote the request: the flag, and a time limit's seconds as
    sbatch's [D-]HH:MM:SS."""
    if field == "time_limit_s":
        message = _SECONDS.sub(lambda m: _slurm_time(int(m.group(1))), message)
    name = FLAGS.get(field, field) if submit or field in _JOB_ONLY else field
    return f"{name}: {message}"


def name_script(text: str, what: str, command: str) -> str:
    """A refusal of `command` (said "the script: …") with the script's name and size."""
    size = len(command.encode("utf-8", "surrogatepass"))
    shown = f"{size / 1024:.1f} KiB" if size >= 1024 else f"{size} bytes"
    return text.replace(f"{FLAGS['command']}: ", f"{what} ({shown}): ")


def _validation(details: Mapping[str, Any], submit: bool = False) -> str:
    errors = details.get("errors")
    if not isinstance(errors, list) or len(errors) < 2:
        return ""
    rest = [
        user_terms(str(e.get("field")), str(e.get("message")), submit)
        for e in errors[1:]
        if isinstance(e, Mapping)
    ]
    return "; also " + "; ".join(rest) if rest else ""


def _maintenance(details: Mapping[str, Any]) -> str:
    state, said = details.get("state"), details.get("message")
    label = f"maintenance {state}" if state else "maintenance"
    if said:
        return f" ({label}: {said})"  # the admin's own words (M1)
    return f" ({label})" if state else ""


def _rate(details: Mapping[str, Any]) -> str:
    wait = details.get("retry_after_s")
    return f"; retry in {wait:g} s" if isinstance(wait, int | float) else ""


def _unauthenticated(details: Mapping[str, Any]) -> str:
    return f"; {TOKEN_HELP}"


_DETAILS: Final[Mapping[str, Callable[[Mapping[str, Any]], str]]] = {
    "NO_FIT_PLACEMENT": _no_fit,
    "VALIDATION_ERROR": _validation,
    "SERVICE_MAINTENANCE": _maintenance,
    "RATE_LIMITED": _rate,
    "UNAUTHENTICATED": _unauthenticated,
}


def api_error(code: str, message: str, details: Mapping[str, Any], *, submit: bool = False) -> str:
    """`CODE: message` and what the details add (the field, the limit, the valid values).
    A refused field is said as the user gave it: `--time` in [D-]HH:MM:SS, the script; with
    `submit` (a `jpu submit` refusal) every field as its flag (`--tier`, `--gpus`)."""
    field = details.get("field")
    said = isinstance(field, str) and message.startswith(f"{field}: ")
    if code == "VALIDATION_ERROR" and said:  # the user's flag and units, not the body's
        message = user_terms(str(field), message[len(str(field)) + 2 :], submit)
    suffix = f" (field: {field})" if field and not said and str(field) not in message else ""
    if code == "VALIDATION_ERROR":
        return f"{code}: {message}{suffix}{_validation(details, submit)}"
    extra = _DETAILS.get(code)
    return f"{code}: {message}{suffix}{extra(details) if extra else ''}"


def array_submitted(array: Mapping[str, Any]) -> str:
    """Q7: one line for an array: its id, how many tasks, and how a task is named."""
    tasks = array.get("tasks") or []
    return f"Submitted array job {array['id']} ({len(tasks)} tasks: {array['id']}_<index>)"


def submitted(job: Mapping[str, Any], me: Mapping[str, Any] | None) -> str:
    """`Submitted job ID`, plus why it waits only when it really is held by the user's
    concurrency limit (Q5): still in the personal queue while every slot is taken. A job in
    the personal queue for the moment between its submission and its promotion is not held."""
    out = f"Submitted job {job['id']}"
    if job.get("state") == "PERSONAL_QUEUE_WAIT" and job.get("pending_reason") == "Held":
        return f"{out} — held (Q9): it starts after `jpu release {job['id']}`"
    if job.get("state") == "PERSONAL_QUEUE_WAIT" and job.get("pending_reason") == "Dependency":
        return f"{out} — waiting for its dependency ({job.get('dependency')}, Q8)"
    if job.get("state") != "PERSONAL_QUEUE_WAIT" or not me:
        return out
    used, limit = me.get("slots_in_use"), me.get("max_active_jobs")
    if isinstance(used, int) and isinstance(limit, int) and used >= limit:
        return (
            f"{out} — queued (waiting for a free slot: {used} of {limit} in use; it moves to "
            "the global queue when one of your jobs ends)"
        )
    return out
