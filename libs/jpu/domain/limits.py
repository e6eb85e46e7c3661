"""What the platform can store: one definition of the bounds of every input (SPEC Q1, E3, E6). Pure.

Every field of a submit that reaches the log ends up in the jobs projection (the PostgreSQL
columns of `store/migrations/0001_core.sql`), in the replay's scratch database, in the policy
core and on the execution backend. An event one of them cannot hold would be appended, then
fail to project and break the audit (SPEC O5). So the bounds are decided here, once,
and used by the gateway's request check and OpenAPI document, by intake's Q1 validation
(`jpu.domain.validation.validate_submit`) and by the admin inputs (maintenance message, lab and user
names):

  * text: no NUL character (PostgreSQL `text` and `jsonb` refuse it) and no unpaired surrogate
    (a lone `\\ud800` escape is valid JSON but not UTF-8: nothing can encode it);
  * numbers: finite (JSON has no Infinity/NaN; encoders turn them into `null`, which would drop
    the value silently) and integers within the column that stores them (`integer` = 32 bits);
  * sizes: the lengths below; JSON nesting at most `MAX_JSON_DEPTH` deep.

Documented limits (the product's choice, not the database's): a job's time limit is at most
`MAX_TIME_LIMIT_S` (365 days; Slurm clusters cap partitions far lower); `min_vram_gb` at most the
32-bit column (any value above every tier's VRAM is NO_FIT_PLACEMENT, Q2).
"""

from __future__ import annotations

import math
import re
import signal as _signal
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final

import msgspec

INT32_MAX: Final = 2**31 - 1  # PostgreSQL `integer`
INT64_MIN: Final = -(2**63)  # PostgreSQL `bigint`, msgspec's native int
INT64_MAX: Final = 2**63 - 1

# --- POST /v1/jobs (SPEC Q1) -----------------------------------------------------------------
MIN_GPUS: Final = 1
MAX_GPUS: Final = 8
MAX_COMMAND_BYTES: Final = 64 * 1024  # UTF-8 bytes of the script
MAX_NAME: Final = 128
NAME_PATTERN: Final = r"^[A-Za-z0-9._-]+$"
MAX_TIERS: Final = 64  # entries of `tiers` (each a known tier name)
MAX_ENV: Final = 64
MAX_ENV_KEY: Final = 256
MAX_ENV_VALUE_BYTES: Final = 32 * 1024  # a Linux environment string may be at most 128 KiB
ENV_KEY_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"
RESERVED_ENV: Final = frozenset({"JOB_ATTEMPT", "JOB_OUTPUT_DIR", "CUDA_VISIBLE_DEVICES"})  # X2
RESERVED_ENV_PREFIX: Final = "SLURM_"
MAX_TIME_LIMIT_S: Final = 365 * 24 * 3600  # the documented maximum (fits the 32-bit column)
MAX_MIN_VRAM_GB: Final = INT32_MAX  # the column; above every tier is NO_FIT_PLACEMENT (Q2)
MAX_IDEMPOTENCY_KEY: Final = 200  # characters of the Idempotency-Key header (Q6)
MAX_ARRAY_SPEC: Final = 4096  # characters of a job array's `array` string (Q7)
SUBMIT_FIELDS: Final = (
    "name",
    "command",
    "num_gpus",
    "tiers",
    "min_vram_gb",
    "time_limit_s",
    "env",
    "chdir",  # U5: where the job runs (jpu.policy.workdir)
    "mail_type",  # Q10: notification kinds (jpu.policy.mail)
    "mail_user",  # Q10: e-mail address for this job's notifications
    "dependency",  # Q8 (jpu.domain.dependencies)
    "hold",  # Q9
    "workspace",  # X4a: the READY workspace the job runs in (jpu.domain.workspaces)
    "array",  # Q7: a job array (jpu.domain.arrays)
    "output",  # U6: sbatch -o, as written (patterns expanded at launch)
    "error",  # U6: sbatch -e
    "open_mode",  # U6: truncate | append
    "signal",  # U6: "[B:]SIG@T" (jpu.policy.sbatch.signal)
    "sbatch",  # U6: the sbatch options as the user gave them; intake decides them
)
# U6: set by intake from `sbatch` (JobSubmitted.sbatch_warnings), never taken from a body
PLATFORM_FIELDS: Final = ("sbatch_warnings",)
MAX_SBATCH_TEXT: Final = 4096  # characters of an -o/-e path or of one warning
MAX_SBATCH_OPTIONS: Final = 60  # options of one submit (at most one warning each)
MAX_SBATCH_OPTION: Final = 64  # characters of an option's name
MAX_SBATCH_VALUE: Final = MAX_SBATCH_TEXT  # characters of an option's value
MAX_SBATCH_LINE: Final = MAX_SBATCH_TEXT  # characters of where it was written
MAX_SBATCH_SOURCE: Final = 256  # characters of the script's name


def sbatch_problem(value: object) -> str | None:
    """U6, Q1: the shape of a submit's `sbatch` (the schema says the same, `submit_schema`):
    {"source": NAME, "options": [{"option": "--qos", "value": "high" | null,
    "source_line": "run.sh:3: #SBATCH --qos=high" | null}, ...]}."""
    shape = (
        f'{{"source": text, "options": [{{"option": "--name", "value": text or null, '
        f'"source_line": text or null}}, ...at most {MAX_SBATCH_OPTIONS}]}}'
    )
    if not isinstance(value, dict) or set(value) - {"source", "options"}:
        return f"an object {shape}"
    if bad := json_problems(value, "sbatch"):  # nothing a store cannot hold (Q1)
        return f"{bad[0].field}: {bad[0].message}"
    source = value.get("source")
    if source is not None and not _text(source, MAX_SBATCH_SOURCE, empty=False):
        return f"source: 1-{MAX_SBATCH_SOURCE} characters"
    options = value.get("options") or []
    if not isinstance(options, list) or len(options) > MAX_SBATCH_OPTIONS:
        return f"options: a list of at most {MAX_SBATCH_OPTIONS}: {shape}"
    for i, o in enumerate(options):
        if not isinstance(o, dict) or "option" not in o or set(o) - _SBATCH_KEYS:
            return f"options[{i}]: {shape}"
        if not _text(o["option"], MAX_SBATCH_OPTION, empty=False):
            return f"options[{i}].option: 1-{MAX_SBATCH_OPTION} characters"
        for key, top in (("value", MAX_SBATCH_VALUE), ("source_line", MAX_SBATCH_LINE)):
            if o.get(key) is not None and not _text(o[key], top, empty=True):
                return f"options[{i}].{key}: at most {top} characters, or null"
    return None


_SBATCH_KEYS: Final = frozenset({"option", "value", "source_line"})


def _text(v: object, top: int, *, empty: bool) -> bool:
    return isinstance(v, str) and (empty or len(v) > 0) and len(v) <= top


# X4a: a workspace's name, also a part of its image's tag
WORKSPACE_NAME: Final = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")


def workspace_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not WORKSPACE_NAME.match(name):
        return "1-64 characters of [a-z0-9_.-], starting with a letter or digit"
    return None


# --- any JSON request ------------------------------------------------------------------------
MAX_BODY_BYTES: Final = 512 * 1024  # well above Q1's 64 KiB command; under NATS' 1 MiB payload
MAX_JSON_DEPTH: Final = 32  # a submit is 3 deep; json.loads would recurse ~1000 deep and fail
MAX_PROBLEMS: Final = 20  # problems reported per request

# --- admin inputs ----------------------------------------------------------------------------
MAX_MAINTENANCE_MESSAGE: Final = 1000
# A lab name is a NATS subject token (`<prefix>.lab.<lab>`: no '.', '*', '>' or spaces).
LAB_NAME_PATTERN: Final = r"^[A-Za-z0-9_-]{1,64}$"
USER_NAME_PATTERN: Final = r"^[A-Za-z0-9._-]{1,64}$"

# "Blank" is what JSON Schema's (ECMA-262) `\s` matches, so the OpenAPI pattern and Q1 agree.
WHITESPACE: Final = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"

_NAME_RE: Final = re.compile(NAME_PATTERN)
_BLANK_RE: Final = re.compile(f"[{WHITESPACE}]*")
_ENV_KEY_RE: Final = re.compile(ENV_KEY_PATTERN)
_LAB_RE: Final = re.compile(LAB_NAME_PATTERN)
_USER_RE: Final = re.compile(USER_NAME_PATTERN)

NUL_MESSAGE: Final = "must not contain a NUL character (\\u0000)"
SURROGATE_MESSAGE: Final = "must not contain an unpaired surrogate (e.g. a lone \\ud800 escape)"


class FieldError(msgspec.Struct, frozen=True):
    field: str  # e.g. "num_gpus", "env.SLURM_JOB_ID", "tiers[0]"
    message: str


# --- text ------------------------------------------------------------------------------------


def text_problem(s: str) -> str | None:
    """Why `s` cannot be stored (NUL, unpaired surrogate), or None when it can."""
    if "\x00" in s:
        return NUL_MESSAGE
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            return SURROGATE_MESSAGE
    return None


def printable(s: str) -> str:
    """`s` safe to echo in an error message (a field name the client sent): NUL and lone
    surrogates as escapes, so the error itself can always be encoded."""
    return s.encode("utf-8", "backslashreplace").decode("utf-8").replace("\x00", "\\x00")


def utf8_len(s: str) -> int:
    return len(s.encode("utf-8", "surrogatepass"))


# --- any JSON value --------------------------------------------------------------------------


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = printable(key)
    return f"{path}.{key}" if path else key


def json_problems(value: Any, path: str = "", max_depth: int = MAX_JSON_DEPTH) -> list[FieldError]:
    """Every place in a decoded JSON value that no store of the platform can hold, each named
    by its path (`command`, `env.FOO`, `tiers[0]`): NUL or an unpaired surrogate in any string
    or object key, a non-finite number, an integer outside 64 bits, nesting deeper than
    `max_depth`. Iterative (no recursion limit); at most MAX_PROBLEMS problems."""
    problems: list[FieldError] = []
    # (path, value, depth, why its key cannot be stored): a bad key is reported in its place
    stack: list[tuple[str, Any, int, str | None]] = [(path, value, 0, None)]
    while stack and len(problems) < MAX_PROBLEMS:
        where, v, depth, bad_key = stack.pop()
        name = where or "body"
        if bad_key is not None:
            problems.append(FieldError(name, f"key {bad_key}"))
        elif isinstance(v, str):
            why = text_problem(v)
            if why:
                problems.append(FieldError(name, why))
        elif isinstance(v, bool) or v is None:
            continue
        elif isinstance(v, int):
            if not INT64_MIN <= v <= INT64_MAX:
                problems.append(FieldError(name, "integer out of range (64-bit)"))
        elif isinstance(v, float):
            if not math.isfinite(v):
                problems.append(FieldError(name, "must be a finite number (not Infinity or NaN)"))
        elif isinstance(v, Mapping | list | tuple):
            if depth >= max_depth:
                problems.append(FieldError(name, f"nested deeper than {max_depth} levels"))
                continue
            items: Iterable[tuple[Any, Any]] = v.items() if isinstance(v, Mapping) else enumerate(v)
            children = [
                (
                    _child(where, k),
                    child,
                    depth + 1,
                    text_problem(k) if isinstance(k, str) else None,
                )
                for k, child in items
            ]
            stack.extend(reversed(children))  # report in document order
    return problems[:MAX_PROBLEMS]


def error_details(problems: list[FieldError]) -> tuple[str, dict[str, Any]]:
    """The SPEC §8 VALIDATION_ERROR message and details for `problems` (the first one named)."""
    first = problems[0]
    return (
        f"{first.field}: {first.message}",
        {"field": first.field, "errors": [msgspec.to_builtins(p) for p in problems]},
    )


def idempotency_key_problem(key: str | None) -> str | None:
    """Why an Idempotency-Key header (Q6; it is recorded in JobSubmitted) is refused, or None."""
    if key is None:
        return None
    if not 0 < len(key) <= MAX_IDEMPOTENCY_KEY:
        return f"1–{MAX_IDEMPOTENCY_KEY} characters"
    return text_problem(key)


# --- names -----------------------------------------------------------------------------------


def name_problem(kind: str, name: str) -> str | None:
    """Why `name` is not a valid lab or user name (`kind` = "lab" | "user"), or None."""
    pattern = _LAB_RE if kind == "lab" else _USER_RE
    if not isinstance(name, str):
        return f"{kind} name must be a string"
    why = text_problem(name)
    if why:
        return f"{kind} name {why}"
    if not pattern.fullmatch(name):
        return f"{kind} name must be 1–64 characters of {pattern.pattern[1:-7]}"
    return None


def blank(s: str) -> bool:
    return bool(_BLANK_RE.fullmatch(s))


def job_name_ok(name: str) -> bool:
    return len(name) <= MAX_NAME and bool(_NAME_RE.fullmatch(name))


def env_key_ok(key: str) -> bool:
    return len(key) <= MAX_ENV_KEY and bool(_ENV_KEY_RE.fullmatch(key))


def env_key_reserved(key: str) -> bool:
    return key in RESERVED_ENV or key.startswith(RESERVED_ENV_PREFIX)


# --- the OpenAPI document of POST /v1/jobs ---------------------------------------------------

_NO_NUL: Final = "^[^\\u0000]*$"


# U6: sbatch's --signal as a submit carries it, normalised by jpu.policy.sbatch: [B:]SIG@SECONDS,
# SIG a signal's name or number on this platform, SECONDS at most Slurm's 65535 — the schema and
# the check (jpu.domain.validation) read this one pattern, so what one allows the other accepts
_SIGNAL_NAMES: Final = "|".join(
    sorted({n.removeprefix("SIG") for n in _signal.Signals.__members__}, key=lambda n: (-len(n), n))
)
_SIGNAL_NUMBERS: Final = "|".join(sorted({str(int(s)) for s in _signal.Signals}, key=len)[::-1])
SIGNAL_PATTERN: Final = (
    f"^(B:)?((SIG)?({_SIGNAL_NAMES})|({_SIGNAL_NUMBERS}))"
    "@([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])$"
)


def _sbatch_schema() -> dict[str, Any]:
    """U6: the sbatch options as given, checked by `sbatch_problem`."""
    text: dict[str, Any] = {"type": ["string", "null"]}
    return {
        "type": ["object", "null"],
        "additionalProperties": False,
        "properties": {
            "source": {
                "type": ["string", "null"],
                "minLength": 1,
                "maxLength": MAX_SBATCH_SOURCE,
                "description": "the script's name, for messages (default: request)",
            },
            "options": {
                "type": ["array", "null"],
                "maxItems": MAX_SBATCH_OPTIONS,
                "items": {
                    "type": "object",
                    "required": ["option"],
                    "additionalProperties": False,
                    "properties": {
                        "option": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": MAX_SBATCH_OPTION,
                            "description": "as sbatch spells it: --qos, -q, --mem ...",
                        },
                        "value": {**text, "maxLength": MAX_SBATCH_VALUE},
                        "source_line": {
                            **text,
                            "maxLength": MAX_SBATCH_LINE,
                            "description": "where the user wrote it, as messages name it: "
                            "run.sh:3: #SBATCH --qos=high",
                        },
                    },
                },
            },
        },
        "description": "the sbatch options the user gave (an #SBATCH line's or sbatch's "
        "command line's), each decided here by the one table (SPEC U6, docs/sbatch.md): "
        "honoured ones become the job's fields (tiers, output, error, open_mode, signal, env), "
        "site bookkeeping is answered in `warnings` and kept on the job, refused ones (and, "
        "with sbatch_compat: strict, the bookkeeping) are 422 naming `sbatch` and each line",
    }


def submit_schema(tier_names: Collection[str] | None = None) -> dict[str, Any]:
    """The JSON Schema of a submit body, from the same bounds intake enforces (Q1). What a
    schema cannot say (UTF-8 bytes, unpaired surrogates, Q2 no-fit) is in the descriptions."""
    tiers_item: dict[str, Any] = {"type": "string"}
    if tier_names:
        tiers_item["enum"] = sorted(tier_names)
    return {
        "type": "object",
        "required": ["command", "num_gpus"],
        "additionalProperties": False,
        "properties": {
            "name": {
                "type": ["string", "null"],
                "minLength": 1,
                "maxLength": MAX_NAME,
                "pattern": NAME_PATTERN,
            },
            "command": {
                "type": "string",
                "minLength": 1,
                "maxLength": MAX_COMMAND_BYTES,
                "pattern": f"^[^\\u0000]*[^\\u0000{WHITESPACE}][^\\u0000]*$",
                "description": "shell script text: not blank, at most "
                f"{MAX_COMMAND_BYTES} bytes of UTF-8, no NUL",
            },
            "num_gpus": {"type": "integer", "minimum": MIN_GPUS, "maximum": MAX_GPUS},
            "tiers": {
                "type": ["array", "null"],
                "items": tiers_item,
                "minItems": 1,
                "maxItems": MAX_TIERS,
                "description": "allowed tiers (omit for any tier)",
            },
            "min_vram_gb": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_MIN_VRAM_GB},
            "time_limit_s": {
                "type": ["number", "null"],
                "exclusiveMinimum": 0,
                "maximum": MAX_TIME_LIMIT_S,
                "description": f"seconds, rounded up; at most {MAX_TIME_LIMIT_S} (365 days)",
            },
            "env": {
                "type": ["object", "null"],
                "maxProperties": MAX_ENV,
                "propertyNames": {
                    "pattern": ENV_KEY_PATTERN,
                    "maxLength": MAX_ENV_KEY,
                    "not": {
                        "anyOf": [
                            {"enum": sorted(RESERVED_ENV)},
                            {"pattern": f"^{RESERVED_ENV_PREFIX}"},
                        ]
                    },
                },
                "additionalProperties": {
                    "type": "string",
                    "maxLength": MAX_ENV_VALUE_BYTES,
                    "pattern": _NO_NUL,
                },
                "description": "variables for the job; JOB_ATTEMPT, JOB_OUTPUT_DIR, "
                "CUDA_VISIBLE_DEVICES and SLURM_* are set by the platform",
            },
            "array": {  # Q7 (jpu.domain.arrays)
                "anyOf": [
                    {"type": "string", "maxLength": MAX_ARRAY_SPEC},
                    {"type": "array", "items": {"type": "integer", "minimum": 0}},
                    {"type": "null"},
                ],
                "description": 'a job array: "0-99", "0-99:2", "1,5,9" (optional "%N": at '
                "most N tasks hold slots at once) or a list of task indices; each task is a "
                "job <id>_<index>",
            },
            "chdir": {  # U5 (jpu.policy.workdir); the CLI sends the directory it runs in
                "type": ["string", "null"],
                "pattern": "^/[^\\u0000]*$",
                "maxLength": 4096,
                "description": "absolute directory the job runs in (like sbatch --chdir), at "
                "most 4096 bytes of UTF-8; omit it for the attempt's JOB_OUTPUT_DIR",
            },
            "mail_type": {  # Q10 (jpu.policy.mail)
                "anyOf": [
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "string"},
                    {"type": "null"},
                ],
                "description": "notify on BEGIN, END, FAIL, REQUEUE (an OOM retry), ALL or "
                "NONE, as a list or comma-separated like sbatch --mail-type; omit it for your "
                "defaults (PUT /v1/me/notifications)",
            },
            "mail_user": {  # Q10
                "type": ["string", "null"],
                "maxLength": 254,
                "description": "e-mail address for this job's notifications (like sbatch "
                "--mail-user); omit it for your registered address",
            },
            "dependency": {  # Q8 (jpu.domain.dependencies)
                "type": ["string", "null"],
                "maxLength": 4096,
                "description": "Slurm syntax: afterok|afternotok|afterany|after:ID[:ID...] "
                "joined by ',' (all must hold), and/or singleton; on jobs of your lab only",
            },
            "hold": {  # Q9
                "type": ["boolean", "null"],
                "description": "submit held: it waits in the personal queue until released",
            },
            **{
                f: {
                    "type": ["string", "null"],
                    "minLength": 1,
                    "maxLength": MAX_SBATCH_TEXT,
                    "description": d,
                }
                for f, d in (
                    ("output", "sbatch -o: the job's stdout also goes there (%j %x %A %a ...)"),
                    ("error", "sbatch -e: the job's stderr also goes there"),
                )
            },
            "open_mode": {"enum": ["truncate", "append", None], "description": "sbatch's"},
            "signal": {
                "type": ["string", "null"],
                "pattern": SIGNAL_PATTERN,
                "description": "sbatch --signal, normalised: [B:]SIG@SECONDS — SIG reaches the "
                "job (B: the batch shell only) SECONDS before the time limit",
            },
            "sbatch": _sbatch_schema(),
            "workspace": {  # X4a (jpu.domain.workspaces)
                "type": ["string", "null"],
                "maxLength": 64,
                "description": "a READY workspace ([a-z0-9_.-], own, else the lab's) the job "
                "runs in; missing or not READY: 422 naming `workspace`",
            },
        },
        "description": "A job (SPEC Q1); null is the same as an absent field. A request no "
        "placement can ever run is 422 NO_FIT_PLACEMENT (Q2).",
    }
