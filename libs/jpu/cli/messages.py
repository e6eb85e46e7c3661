"""One-line messages that say the fix (SPEC U1, §8): API refusals with their details, and what a
submission became. Pure: bodies and details in, text out.

A refusal names the field, the limit and the valid values when the API gives them:
`NO_FIT_PLACEMENT` says how many GPUs the largest placement has, `SERVICE_MAINTENANCE` carries
the admin's message, `UNAUTHENTICATED` says where the token comes from.
"""

from __future__ import annotations

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


def _validation(details: Mapping[str, Any]) -> str:
    errors = details.get("errors")
    if not isinstance(errors, list) or len(errors) < 2:
        return ""
    rest = [f"{e.get('field')}: {e.get('message')}" for e in errors[1:] if isinstance(e, Mapping)]
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


def api_error(code: str, message: str, details: Mapping[str, Any]) -> str:
    """`CODE: message` and what the details add (the field, the limit, the valid values)."""
    field = details.get("field")
    suffix = f" (field: {field})" if field and str(field) not in message else ""
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
