"""The two-level queue (SPEC Q1, Q4, Q5, S1, S2): submit validation and promotion. Pure."""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgspec

SLOT_HOLDING_STATES: frozenset[str] = frozenset(
    {"GLOBAL_QUEUE_WAIT", "RESERVING", "DISPATCHED", "RUNNING", "CANCELLING"}
)  # S1
TERMINAL_STATES: frozenset[str] = frozenset({"COMPLETED", "FAILED", "CANCELLED"})  # S2
slot_holding_states = SLOT_HOLDING_STATES
terminal_states = TERMINAL_STATES

MAX_COMMAND_BYTES = 64 * 1024
MAX_NAME = 128
MAX_ENV = 64
NAME_RE = re.compile(r"[A-Za-z0-9._-]+")
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RESERVED_ENV = frozenset({"JOB_ATTEMPT", "JOB_OUTPUT_DIR", "CUDA_VISIBLE_DEVICES"})  # X2
SUBMIT_FIELDS = ("name", "command", "num_gpus", "tiers", "min_vram_gb", "time_limit_s", "env")


class FieldError(msgspec.Struct, frozen=True):
    field: str  # e.g. "num_gpus", "env.SLURM_JOB_ID"
    message: str


def promotions(
    personal: Mapping[str, Sequence[str]],
    slot_holding: Mapping[str, int],
    limits: Mapping[str, int],
    default_limit: int,
) -> list[str]:
    """SPEC Q5: per user, the oldest personal-queue jobs that fit under `max_active_jobs`.

    `personal[user]` is in submission order. Users are visited by name for a stable output.
    """
    out: list[str] = []
    for user in sorted(personal):
        free = limits.get(user, default_limit) - slot_holding.get(user, 0)
        if free > 0:
            out.extend(personal[user][:free])
    return out


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_env(env: Any) -> list[FieldError]:
    if not isinstance(env, Mapping):
        return [FieldError("env", "must be an object of string to string")]
    errors: list[FieldError] = []
    if len(env) > MAX_ENV:
        errors.append(FieldError("env", f"at most {MAX_ENV} entries"))
    for key, value in env.items():
        where = f"env.{key}"
        if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
            errors.append(FieldError(where, "key must match [A-Za-z_][A-Za-z0-9_]*"))
        elif key in RESERVED_ENV or key.startswith("SLURM_"):
            errors.append(FieldError(where, "reserved variable, set by the platform"))
        if not isinstance(value, str):
            errors.append(FieldError(where, "value must be a string"))
    return errors


def _check_unknown(body: Mapping[str, Any]) -> list[FieldError]:
    """A misspelt field must not be dropped silently: `"tier": "rtx4090"` would otherwise run
    the job on any tier (Q1 names the field; the hint names the one probably meant)."""
    errors = []
    for key in sorted(set(body) - set(SUBMIT_FIELDS), key=str):
        close = difflib.get_close_matches(str(key), SUBMIT_FIELDS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        errors.append(
            FieldError(str(key), f"unknown field{hint} (known: {', '.join(SUBMIT_FIELDS)})")
        )
    return errors


def _check_tiers(tiers: Any, known: Collection[str]) -> list[FieldError]:
    if not isinstance(tiers, list | tuple) or not all(isinstance(t, str) for t in tiers):
        return [FieldError("tiers", "must be a list of tier names")]
    unknown = sorted(set(tiers) - set(known))
    return [FieldError("tiers", f"unknown tier(s): {', '.join(unknown)}")] if unknown else []


def validate_submit(body: Mapping[str, Any], known_tiers: Collection[str]) -> list[FieldError]:
    """SPEC Q1: every violation, each naming its field; empty when the request is valid."""
    errors: list[FieldError] = []
    n: Any = body.get("num_gpus")
    if not _is_int(n) or not 1 <= n <= 8:
        errors.append(FieldError("num_gpus", "must be an integer from 1 to 8"))
    cmd = body.get("command")
    if not isinstance(cmd, str) or not cmd.strip():
        errors.append(FieldError("command", "must be a non-empty string"))
    elif len(cmd.encode()) > MAX_COMMAND_BYTES:
        errors.append(FieldError("command", "must be at most 64 KiB"))
    name = body.get("name")
    if name is not None and (
        not isinstance(name, str) or len(name) > MAX_NAME or not NAME_RE.fullmatch(name)
    ):
        errors.append(FieldError("name", "1–128 characters of [A-Za-z0-9._-]"))
    if body.get("tiers") is not None:
        errors.extend(_check_tiers(body["tiers"], known_tiers))
    vram = body.get("min_vram_gb")
    if vram is not None and (not _is_int(vram) or vram < 1):
        errors.append(FieldError("min_vram_gb", "must be a positive integer"))
    limit = body.get("time_limit_s")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int | float) or not limit > 0
    ):
        errors.append(FieldError("time_limit_s", "must be a positive number of seconds"))
    if body.get("env") is not None:
        errors.extend(_check_env(body["env"]))
    return errors + _check_unknown(body)
