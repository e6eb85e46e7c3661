"""Submit validation (SPEC Q1): every violation of a submit body, each naming its field. Pure.

The bounds are jpu.domain.limits'; the rules of the fields another module owns are asked of it
(U5 `chdir`: jpu.policy.workdir; Q10 `mail_type`/`mail_user`: jpu.policy.mail). Intake's verdict
of record is jpu.domain.submission, which adds Q8's dependency and Q6's key to these.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Collection, Mapping
from typing import Any, Final

from jpu.domain import limits as bounds
from jpu.policy import mail
from jpu.policy.workdir import chdir_problem

# The bounds are jpu.domain.limits' (one definition of what is storable, shared with the gateway).
MAX_COMMAND_BYTES = bounds.MAX_COMMAND_BYTES
MAX_NAME = bounds.MAX_NAME
MAX_ENV = bounds.MAX_ENV
RESERVED_ENV = bounds.RESERVED_ENV  # X2
SUBMIT_FIELDS = bounds.SUBMIT_FIELDS
FieldError = bounds.FieldError


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_env(env: Any) -> list[FieldError]:
    if not isinstance(env, Mapping):
        return [FieldError("env", "must be an object of string to string")]
    errors: list[FieldError] = []
    if len(env) > MAX_ENV:
        errors.append(FieldError("env", f"at most {MAX_ENV} entries"))
        return errors  # one problem, not one per entry of a huge object
    for key, value in env.items():
        where = f"env.{bounds.printable(key)}" if isinstance(key, str) else "env"
        if not isinstance(key, str) or not bounds.env_key_ok(key):
            errors.append(
                FieldError(
                    where,
                    f"key must match [A-Za-z_][A-Za-z0-9_]* (at most {bounds.MAX_ENV_KEY})",
                )
            )
        elif bounds.env_key_reserved(key):
            errors.append(FieldError(where, "reserved variable, set by the platform"))
        if not isinstance(value, str):
            errors.append(FieldError(where, "value must be a string"))
        elif bounds.utf8_len(value) > bounds.MAX_ENV_VALUE_BYTES:
            errors.append(FieldError(where, f"at most {bounds.MAX_ENV_VALUE_BYTES} bytes"))
    return errors


def _check_unknown(body: Mapping[str, Any]) -> list[FieldError]:
    """A misspelt field must not be dropped silently: `"tier": "rtx4090"` would otherwise run
    the job on any tier (Q1 names the field; the hint names the one probably meant)."""
    errors = []
    known = {*SUBMIT_FIELDS, *bounds.PLATFORM_FIELDS}  # those: `_check_warnings` says why
    for key in sorted(set(body) - known, key=str)[: bounds.MAX_PROBLEMS]:
        name = bounds.printable(str(key))
        close = difflib.get_close_matches(name, SUBMIT_FIELDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        errors.append(FieldError(name, f"unknown field{hint} (known: {', '.join(SUBMIT_FIELDS)})"))
    return errors


def _check_tiers(tiers: Any, known: Collection[str]) -> list[FieldError]:
    if not isinstance(tiers, list | tuple) or not all(isinstance(t, str) for t in tiers):
        return [FieldError("tiers", "must be a list of tier names")]
    if not 1 <= len(tiers) <= bounds.MAX_TIERS:
        return [FieldError("tiers", f"1–{bounds.MAX_TIERS} tier names (omit it for any tier)")]
    unknown = sorted(set(tiers) - set(known))
    if unknown:
        names = ", ".join(bounds.printable(t) for t in unknown[:10])
        valid = ", ".join(sorted(known))
        return [FieldError("tiers", f"unknown tier(s): {names} (tiers here: {valid})")]
    return []


def _check_number(
    body: Mapping[str, Any], field: str, top: int, *, integer: bool
) -> list[FieldError]:
    v = body.get(field)
    if v is None:
        return []
    if integer and not _is_int(v):
        return [FieldError(field, f"must be an integer from 1 to {top}")]
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        return [FieldError(field, "must be a finite number")]
    if not 0 < v <= top:
        return [FieldError(field, f"must be positive and at most {top}")]
    return []


def validate_submit(body: Mapping[str, Any], known_tiers: Collection[str]) -> list[FieldError]:
    """SPEC Q1: every violation, each naming its field; empty when the request is valid.
    First what no store can hold (jpu.domain.limits: NUL, unpaired surrogates, non-finite numbers,
    64-bit integers, nesting), then the rules of each field within jpu.domain.limits' bounds."""
    storable = bounds.json_problems(body)
    if storable:
        return storable
    errors: list[FieldError] = []
    n: Any = body.get("num_gpus")
    if not _is_int(n) or not bounds.MIN_GPUS <= n <= bounds.MAX_GPUS:
        errors.append(FieldError("num_gpus", "must be an integer from 1 to 8"))
    cmd = body.get("command")
    if not isinstance(cmd, str) or bounds.blank(cmd):
        errors.append(FieldError("command", "must be a non-empty string"))
    elif bounds.utf8_len(cmd) > MAX_COMMAND_BYTES:
        errors.append(FieldError("command", "must be at most 64 KiB"))
    name = body.get("name")
    if name is not None and (not isinstance(name, str) or not bounds.job_name_ok(name)):
        errors.append(FieldError("name", "1–128 characters of [A-Za-z0-9._-]"))
    if body.get("tiers") is not None:
        errors.extend(_check_tiers(body["tiers"], known_tiers))
    errors += _check_number(body, "min_vram_gb", bounds.MAX_MIN_VRAM_GB, integer=True)
    errors += _check_number(body, "time_limit_s", bounds.MAX_TIME_LIMIT_S, integer=False)
    if body.get("env") is not None:
        errors.extend(_check_env(body["env"]))
    if body.get("chdir") is not None and (why := chdir_problem(body["chdir"])):  # U5
        errors.append(FieldError("chdir", why))
    if body.get("mail_type") is not None and (why := mail.parse_kinds(body["mail_type"])[1]):
        errors.append(FieldError("mail_type", why))  # Q10
    if body.get("mail_user") is not None and (why := mail.email_problem(body["mail_user"])):
        errors.append(FieldError("mail_user", why))  # Q10
    workspace = body.get("workspace")
    if workspace is not None and (why := bounds.workspace_name_problem(workspace)):
        errors.append(FieldError("workspace", why))  # X4a
    errors += slurm_io_problems(body)  # U6
    return errors + _check_warnings(body) + _check_unknown(body)


def _check_warnings(body: Mapping[str, Any]) -> list[FieldError]:
    """U6: the sbatch options as given, bounded; their warnings are intake's to decide
    (jpu.domain.submission.with_sbatch), never a client's to send."""
    errors = [
        FieldError(f, "set by the platform from `sbatch` (SPEC U6); send the options there")
        for f in bounds.PLATFORM_FIELDS
        if f in body
    ]
    if body.get("sbatch") is not None and (why := bounds.sbatch_problem(body["sbatch"])):
        errors.append(FieldError("sbatch", why))
    return errors


def slurm_io_problems(body: Mapping[str, Any]) -> list[FieldError]:
    """U6: `output`/`error` are file names, `open_mode` append|truncate, `signal` the normalised
    `[B:]SIG@SECONDS` (the schema says the same: jpu.domain.limits)."""
    errors = []
    for field in ("output", "error"):
        v = body.get(field)
        if v is not None and (not isinstance(v, str) or not v or len(v) > bounds.MAX_SBATCH_TEXT):
            errors.append(
                FieldError(field, f"a file name of 1-{bounds.MAX_SBATCH_TEXT} characters")
            )
    mode = body.get("open_mode")
    if mode is not None and mode not in ("append", "truncate"):
        errors.append(FieldError("open_mode", "append or truncate"))
    sig = body.get("signal")
    if sig is not None and (not isinstance(sig, str) or not _SIGNAL.match(sig)):
        errors.append(FieldError("signal", "[B:]SIG@SECONDS (0-65535), e.g. B:USR1@90"))
    return errors


_SIGNAL: Final = re.compile(bounds.SIGNAL_PATTERN)
