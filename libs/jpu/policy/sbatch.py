"""What a script's sbatch options decide at submit (SPEC U6). Pure.

A submit carries the options as the user gave them, each with its line (`Given`); intake reads
them by the table (`read_options`: each honoured option's value as written, one warning per
option of the second class, a problem per refused one) and `decide` turns them, with the site's
tiers and sbatch settings, into the tiers the job may run on, its extra environment, its
-o/-e/--signal fields and its warnings — or the problems that refuse it, each naming the line,
the option and the fix.

CPUs and memory are constraints on the tier (SPEC U6, SEC6): a tier brings `cpus_per_gpu` ×
GPUs CPUs and `mem_gb_per_gpu` × GPUs GB; only tiers that cover the request are admitted.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from jpu.config import Tier
from jpu.policy.sbatch_options import BY_NAME

Raw = Mapping[str, tuple[str, str]]  # parser key -> (value as written, "where: option=value")
# one option as the user gave it: (option as in the table, value or None, where it was written:
# "run.sh:3: #SBATCH --qos=high"); a submit carries them raw and intake decides (SPEC U6)
Given = tuple[str, str | None, str]
Compat = Literal["lenient", "strict"]
Unknown = Literal["warn", "refuse"]
ANY_TIER: Final = "*"  # in partition_aliases: every tier

_MEM: Final = re.compile(r"^(?P<n>\d+(?:\.\d+)?)(?P<unit>[KMGT]?)B?$", re.IGNORECASE)
_MB: Final = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0 * 1024}
_SIGNAL: Final = re.compile(r"^(?:(?P<who>[RB]{1,2}):)?(?P<sig>[A-Za-z0-9]+)(?:@(?P<t>\d+))?$")
_SIGNALS: Final = frozenset(
    {"HUP", "INT", "QUIT", "ABRT", "KILL", "USR1", "USR2", "TERM", "ALRM", "CONT", "STOP",
     "TSTP", "URG", "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH", "IO", "PWR", "SYS", "TRAP"}
)  # fmt: skip
_SIGNAL_NUMBERS: Final = {1: "HUP", 2: "INT", 3: "QUIT", 9: "KILL", 10: "USR1", 12: "USR2",
                          14: "ALRM", 15: "TERM"}  # fmt: skip
_ENV_KEY: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
KEEP: Final = "delete the line (or write ##SBATCH to keep it as a comment)"
# honoured options whose value `decide` reads, kept as written with the line
RAW_KEYS: Final = frozenset(
    {"cpus_per_task", "cpus_per_gpu", "mem", "mem_per_cpu", "mem_per_gpu", "account",
     "constraint", "export", "output", "error", "open_mode", "signal", "ntasks", "nodes"}
)  # fmt: skip
MAIL_UNSENT: Final = frozenset(
    {"TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "INVALID_DEPEND",
     "STAGE_OUT"}
)  # fmt: skip
ZERO_TIME: Final = frozenset({"0", "0:0", "00:00:00"})  # --time=0: the site's maximum
_GRES_GPU: Final = re.compile(r"^gpu(?::(?P<type>[A-Za-z][A-Za-z0-9._-]*))?(?::(?P<count>\d+))?$")
_GPUS: Final = re.compile(r"^(?:(?P<type>[A-Za-z][A-Za-z0-9._-]*):)?(?P<count>\d+)$")


@dataclass(frozen=True)
class Site:
    """The site's tiers and its sbatch settings (config `partition_aliases`, `sbatch_compat`,
    `sbatch_unknown_partition`) and the submitter's lab."""

    tiers: Sequence[Tier]
    partition_aliases: Mapping[str, Sequence[str]] = field(default_factory=dict)
    compat: Compat = "lenient"
    unknown_partition: Unknown = "warn"
    lab: str | None = None
    mail: bool = True  # Q10: the site sends e-mail (config smtp_host is set)


@dataclass
class Decision:
    tiers: list[str] | None = None  # None: any tier
    env: dict[str, str] = field(default_factory=dict)
    output: str | None = None  # -o, as written (patterns expanded at launch)
    error: str | None = None  # -e
    open_mode: str | None = None  # "truncate" | "append"
    signal: str | None = None  # normalised "[B:]SIG@T"
    notes: list[str] = field(default_factory=list)  # honoured, worth saying (--time=0)
    warnings: list[str] = field(default_factory=list)  # SPEC U6's second class
    problems: list[str] = field(default_factory=list)  # refused


def norm(name: str) -> str:
    """A GPU model or tier as users write it: `NVIDIA RTX 4090`, `rtx_4090`, `RTX4090`."""
    s = re.sub(r"[\s_-]+", "", name.lower())
    return s.removeprefix("nvidia").removeprefix("geforce")


def matching_tiers(word: str, tiers: Sequence[Tier]) -> list[str]:
    """The tiers a GPU type / `-C` feature names: a tier's name, model or partition."""
    w = norm(word)
    return [t.name for t in tiers if w in (norm(t.name), norm(t.model), norm(t.partition))]


def mem_mb(value: str) -> float | None:
    """Slurm memory: MB by default, K/M/G/T suffixes; None if not one."""
    m = _MEM.match(value.strip())
    return None if m is None else float(m["n"]) * _MB[(m["unit"] or "M").upper()]


def signal(value: str) -> str | None:
    """`--signal=[{R|B}:]SIG[@T]` → "[B:]SIG@T" (T default 60, as Slurm); None if not one."""
    m = _SIGNAL.match(value.strip())
    if m is None:
        return None
    sig = m["sig"].upper().removeprefix("SIG")
    if sig.isdigit():
        sig = _SIGNAL_NUMBERS.get(int(sig), "")
    if sig not in _SIGNALS:
        return None
    shell = "B:" if "B" in (m["who"] or "").upper() else ""
    return f"{shell}{sig}@{int(m['t'] or 60)}"


def export(value: str, environ: Mapping[str, str]) -> tuple[dict[str, str], str | None]:
    """`--export=ALL|NONE|[ALL,]VAR[=VALUE],…` → the variables to set (a bare VAR takes its value
    at submit, as sbatch does), or why not."""
    env: dict[str, str] = {}
    for item in value.split(","):
        key, eq, val = item.partition("=")
        if not eq and key.upper() in ("ALL", "NONE", ""):
            continue
        if not _ENV_KEY.match(key):
            return {}, f"{item!r}: use ALL, NONE or VAR=VALUE,…"
        if eq:
            env[key] = val
        elif key in environ:
            env[key] = environ[key]
    return env, None


def tasks(raw: Raw) -> int:
    """The tasks asked for (-n; 1 when not said or not a number): Slurm multiplies the
    per-task CPUs and GPUs by it, and so does the tier check (the script still runs once)."""
    value = raw.get("ntasks", ("1", ""))[0]
    return int(value) if value.isdigit() and int(value) > 0 else 1


def gpus_asked(raw: Raw, gpus: int) -> int:
    """`gpus` (the count the GPU options said) × the tasks for --gpus-per-task."""
    return gpus * tasks(raw) if "gpus_per_task" in raw else gpus


def _int(raw: Raw, key: str, problems: list[str]) -> int | None:
    if key not in raw:
        return None
    value, where = raw[key]
    if value.isdigit() and int(value) > 0:
        return int(value)
    problems.append(f"{where}: a whole number (at least 1)")
    return None


def _mem(raw: Raw, key: str, problems: list[str]) -> float | None:
    if key not in raw:
        return None
    value, where = raw[key]
    mb = mem_mb(value)
    if mb is None:
        problems.append(f"{where}: memory is N[K|M|G|T] (MB by default), e.g. 32G")
    return mb


def _tier_set(names: Sequence[str], tiers: Sequence[Tier], where: str, out: Decision) -> set[str]:
    """GPU types / tier names → tier names; a type no tier offers is refused (SPEC U6)."""
    found: set[str] = set()
    for name in names:
        hit = matching_tiers(name, tiers)
        if not hit:
            offered = ", ".join(f"{t.name} ({t.model})" for t in tiers)
            out.problems.append(
                f"{where}: no tier offers GPU type {name!r}; the site offers {offered}: "
                "name one of them, or drop the type"
            )
        found.update(hit)
    return found


def _partitions(raw: Raw, site: Site, out: Decision) -> set[str] | None:
    if "partition" not in raw:
        return None
    value, where = raw["partition"]
    every = {t.name for t in site.tiers}
    by_partition = {t.partition: t.name for t in site.tiers}
    found: set[str] = set()
    unknown: list[str] = []
    for p in (p.strip() for p in value.split(",") if p.strip()):
        if p in site.partition_aliases:
            names = list(site.partition_aliases[p])
            found |= every if not names or ANY_TIER in names else set(names) & every
        elif p in by_partition:
            found.add(by_partition[p])
        elif p in every:
            found.add(p)
        else:
            unknown.append(p)
    if unknown:
        known = ", ".join([*sorted(set(by_partition)), *sorted(site.partition_aliases)])
        what = f"partition {', '.join(unknown)} is not one of this site's ({known})"
        if site.unknown_partition == "refuse":
            out.problems.append(f"{where}: {what}; use one of them, or drop -p")
        else:
            _warn(out, site, f"{where}: {what}: any tier")
    return found if found else None if unknown else set()


def _constraint(raw: Raw, site: Site, out: Decision) -> set[str] | None:
    if "constraint" not in raw:
        return None
    value, where = raw["constraint"]
    words = [re.sub(r"[\[\]()]|\*\d+", "", w).strip() for w in re.split(r"[|&,]", value)]
    words = [w for w in words if w]
    found: set[str] = set()
    unknown = []
    for w in words:
        hit = matching_tiers(w.strip(), site.tiers)
        found.update(hit)
        if not hit:
            unknown.append(w.strip())
    if unknown and not found:
        what = f"feature {', '.join(unknown)} is not a tier or GPU model here"
        if site.unknown_partition == "refuse":
            out.problems.append(f"{where}: {what}; name a tier (`jpu tiers`) or drop -C")
        else:
            _warn(out, site, f"{where}: {what}: any tier")
        return None
    return found


def _warn(out: Decision, site: Site, line: str) -> None:
    if site.compat == "strict":  # SPEC U6: a site may refuse the second class
        out.problems.append(f"{line} (refused: this site sets sbatch_compat: strict; drop it)")
    else:
        out.warnings.append(line)


def unsent_mail(site: Site, mail_user: str | None, where: str) -> str | None:
    """Q10: a job naming an address (`where`: its line, or the command line's flag) on a site
    that sends no e-mail is accepted with a warning, kept on the job with U6's, never with its
    mail dropped unsaid."""
    if mail_user is None or site.mail:
        return None
    return (
        f"{where}: this site sends no e-mail (no SMTP server configured: smtp_host), so none "
        f"will reach {mail_user}; `jpu notify --webhook URL` sends them to a webhook instead"
    )


def decide(
    raw: Raw,
    gpus: int,
    types: Sequence[str],
    types_where: str,
    site: Site,
    warnings: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> Decision:
    """The job's tiers, env, -o/-e/--signal fields and warnings from the parsed options `raw`,
    `gpus` GPUs and the GPU `types` asked for (tier names or models; from `types_where`)."""
    out = Decision()
    for w in warnings:
        _warn(out, site, w)
    tiers = list(site.tiers)
    allowed = {t.name for t in tiers}
    if types:
        allowed &= _tier_set(types, site.tiers, types_where, out)
    for narrowed in (_partitions(raw, site, out), _constraint(raw, site, out)):
        if narrowed is not None:
            allowed &= narrowed
    _accounts(raw, site, out)
    _files(raw, out)
    if "export" in raw:
        env, why = export(raw["export"][0], environ or {})
        out.env = env
        if why:
            out.problems.append(f"{raw['export'][1]}: {why}")
    cands = [t for t in tiers if t.name in allowed]
    if not cands and not out.problems:
        out.problems.append(
            f"{types_where}: no tier is in every one of -p, -C and the GPU type asked for; "
            "keep one of them"
        )
    fit = _resources(raw, gpus, cands, out)
    final = cands if fit is None else fit
    if len(final) < len(tiers) or types:  # narrowed (a type named keeps its tiers)
        out.tiers = [t.name for t in final]
    return out


def _accounts(raw: Raw, site: Site, out: Decision) -> None:
    if "account" in raw:
        value, where = raw["account"]
        if site.lab is not None and value.lower() != site.lab.lower():
            _warn(out, site, f"{where}: jobs are charged to your lab {site.lab}, not {value}")
    if "ntasks" in raw:
        value, where = raw["ntasks"]
        if not re.match(r"^1(?:-1)?$", value):
            if not value.isdigit() or int(value) < 1:
                out.problems.append(f"{where}: a whole number of tasks (at least 1)")
            else:
                _warn(out, site, f"{where}: the script runs once, as under sbatch (one task)")
    if "nodes" in raw:
        value, where = raw["nodes"]
        if not re.match(r"^1(?:-1)?$", value):
            out.problems.append(
                f"{where}: a job runs on one node: multi-GPU jobs run inside one placement "
                "(same node, same tier, SPEC P3); use -N 1 (`jpu pool` shows the largest)"
            )
    if "time_zero" in raw:
        out.notes.append(f"{raw['time_zero'][1]}: no time limit here means the site's maximum")


def _files(raw: Raw, out: Decision) -> None:
    out.output = raw["output"][0] if "output" in raw else None
    out.error = raw["error"][0] if "error" in raw else None
    if "open_mode" in raw:
        value, where = raw["open_mode"]
        if value.lower() not in ("truncate", "append"):
            out.problems.append(f"{where}: --open-mode is truncate or append")
        else:
            out.open_mode = value.lower()
    if "signal" in raw:
        value, where = raw["signal"]
        out.signal = signal(value)
        if out.signal is None:
            out.problems.append(f"{where}: use [{{R|B}}:]SIG[@SECONDS], e.g. B:USR1@90")


def _resources(raw: Raw, gpus: int, cands: Sequence[Tier], out: Decision) -> list[Tier] | None:
    """The candidate tiers that bring the CPUs and memory asked for, or None when nothing was
    asked for (any candidate). Refused, naming the largest that fits, when none does."""
    cpt = _int(raw, "cpus_per_task", out.problems)
    cpg = _int(raw, "cpus_per_gpu", out.problems)
    mem, mpc, mpg = (_mem(raw, k, out.problems) for k in ("mem", "mem_per_cpu", "mem_per_gpu"))
    gpus = max(gpus, 1)
    if "gres_zero" in raw:
        out.problems.append(f"{raw['gres_zero'][1]}: a job here asks for at least 1 GPU: gpu:1")
    too_many = [t for t in cands if t.max_gpus < gpus]
    if cands and len(too_many) == len(cands) and "gpus_count" in raw:  # else Q2's to say
        most = max(t.max_gpus for t in cands)
        out.problems.append(
            f"{raw['gpus_count'][1]}: {gpus} GPUs on one node: no "
            f"tier offers that many (at most {most}); ask for at most {most}"
        )
        return []
    cands = [t for t in cands if t.max_gpus >= gpus] or list(cands)
    if all(v is None for v in (cpt, cpg, mem, mpc, mpg)):
        return None
    cpus = max((cpt or 0) * tasks(raw), (cpg or 0) * gpus)  # Slurm's: per task × tasks
    fit = list(cands)
    if cpus:
        where = raw["cpus_per_task"][1] if cpt else raw["cpus_per_gpu"][1]
        fit = [t for t in fit if t.cpus_per_gpu * gpus >= cpus]
        if not fit and cands:
            best = max(cands, key=lambda t: t.cpus_per_gpu)
            out.problems.append(
                f"{where}: {cpus} CPUs: no tier brings that many with {gpus} GPU(s) "
                f"(the most: {best.name}, {best.cpus_per_gpu * gpus} CPUs); ask for at most "
                f"{best.cpus_per_gpu * gpus} or for more GPUs"
            )
            return []
    need: list[tuple[float, str]] = []
    if mem:  # --mem=0: all the memory of the node, i.e. the tier's
        need.append((mem, raw["mem"][1]))
    if mpc:
        need.append((mpc * max(cpus, 1), raw["mem_per_cpu"][1]))
    if mpg:
        need.append((mpg * gpus, raw["mem_per_gpu"][1]))
    for mb, where in need:
        ok = [t for t in fit if t.mem_gb_per_gpu * gpus * 1024 >= mb]
        if not ok:
            top = max(fit, key=lambda t: t.mem_gb_per_gpu, default=None)
            biggest = f"{top.name}, {top.mem_gb_per_gpu * gpus}G" if top else "none"
            out.problems.append(
                f"{where}: {mb / 1024:g}G of memory: no tier brings that much with {gpus} "
                f"GPU(s) (the most: {biggest}); ask for less or for more GPUs"
            )
            return []
        fit = ok
    return fit


# --- the options as given (a submit's `sbatch`), read by the table ------------------------------


@dataclass
class Read:
    """What a submit's sbatch options say, by the table (SPEC U6), before `decide`."""

    raw: dict[str, tuple[str, str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # the second class, one per option
    problems: list[str] = field(default_factory=list)  # refused, or not an sbatch option
    types: list[str] = field(default_factory=list)  # the GPU type --gpus/--gres named


def gpu_request(opt: str, value: str) -> tuple[int, str | None] | str:
    """`--gres=gpu[:TYPE][:N]` or `--gpus[-per-*]=[TYPE:]N` → (N, TYPE), or why not."""
    if BY_NAME[opt].key == "gres":
        entries = [e for e in value.split(",") if e]
        if len(entries) != 1:
            return "one GPU request per job: --gres=gpu:N or --gres=gpu:TIER:N (SPEC P3)"
        m = _GRES_GPU.match(entries[0])
        if m is None:
            return "only GPUs can be requested: --gres=gpu, gpu:N or gpu:TIER:N"
        if m["count"] is not None and int(m["count"]) < 1:
            return "a job here asks for at least 1 GPU: --gres=gpu:1 (or drop the line)"
        return int(m["count"] or 1), m["type"]
    m = _GPUS.match(value)
    if m is None:
        return "use N or TIER:N (one GPU type per job: a job runs in one placement, SPEC P3)"
    if int(m["count"]) < 1:
        return "a job here asks for at least 1 GPU"
    return int(m["count"]), m["type"]


def refusal(opt: str) -> str | None:
    """Why `opt` is refused whatever its value (SPEC U6's third class, or not an sbatch option
    at all: a directive is never dropped silently); None when the table takes it."""
    o = BY_NAME.get(opt)
    if o is None:
        known = [n for n in BY_NAME if n.startswith("--")]
        close = difflib.get_close_matches(opt, known, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]}?)" if close and opt.startswith("--") else ""
        return f"not an sbatch option{hint} (docs/sbatch.md lists them); {KEEP}"
    return f"{o.meaning}; {KEEP}" if o.cls == "refused" else None


def mail_kinds(value: str) -> tuple[str, list[str]]:
    """`--mail-type`: (the kinds Q10 sends, Slurm's kinds this platform does not send)."""
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    unsent = [k for k in kinds if k.upper() in MAIL_UNSENT]
    return ",".join(k for k in kinds if k not in unsent) or "NONE", unsent


def read_options(given: Sequence[Given]) -> Read:
    """The options in the order given (a later one wins), each by its class in the table: the
    honoured ones' values for `decide`, one warning per option of the second class, a problem
    naming the line for a refused or unknown one."""
    out = Read()
    for opt, value, line in given:
        o = BY_NAME.get(opt)
        why = refusal(opt)
        if o is None or why is not None:
            out.problems.append(f"{line}: {why}")
            continue
        if o.cls == "warning":  # SPEC U6: site bookkeeping, one line per option
            out.warnings.append(f"{line}: accepted and ignored: {o.meaning}")
        elif o.value == "none" or o.key in ("hold", "wrap"):
            continue
        elif value is None:
            out.problems.append(f"{line}: needs a value")
        elif o.key in RAW_KEYS:
            out.raw[o.key] = (value, line)
        elif o.key in ("gpus", "gres"):
            _gpu_option(opt, value, line, out)
        elif o.key == "time" and value.strip() in ZERO_TIME:
            out.raw["time_zero"] = (value, line)
        elif o.key in ("partition", "mail_user"):  # mail_user: its line, for Q10's warning
            out.raw[o.key] = (value, line)
        elif o.key == "mail_type" and (unsent := mail_kinds(value)[1]):
            out.warnings.append(
                f"{line}: accepted; {','.join(unsent)} mail is not sent here (BEGIN, END, FAIL, "
                "REQUEUE are)"
            )
    return out


def _gpu_option(opt: str, value: str, line: str, out: Read) -> None:
    asked = gpu_request(opt, value)
    if isinstance(asked, str):
        out.problems.append(f"{line}: {asked}")
        return
    out.raw["gpus_count"] = (value, line)
    out.raw.pop("gpus_per_task", None)
    if opt == "--gpus-per-task":  # × the tasks, as Slurm counts (`gpus_asked`)
        out.raw["gpus_per_task"] = (value, line)
    if asked[1]:  # the last GPU option naming a type (the command line's over the script's)
        out.types = [asked[1]]


def site_of(config: Any, lab: str | None = None) -> Site:
    """The site's tiers and sbatch settings from its configuration (jpu.config.Config)."""
    return Site(
        tiers=list(config.tiers),
        partition_aliases=dict(getattr(config, "partition_aliases", {}) or {}),
        compat=getattr(config, "sbatch_compat", "lenient"),
        unknown_partition=getattr(config, "sbatch_unknown_partition", "warn"),
        lab=lab,
        mail=bool(getattr(config, "smtp_host", "")),  # Q10
    )
