"""`#SBATCH` lines (and `jpu submit`'s sbatch flags), read by the one table of sbatch options
(jpu.domain.sbatch_options, SPEC U6). Pure."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Final

from jpu.cli.directives import model
from jpu.cli.directives.model import Kind, Reader
from jpu.domain.sbatch_options import BY_NAME, FLAGS

_KEEP = "delete the line (or write ##SBATCH to keep it as a comment)"
# honoured options whose value the policy reads (jpu.policy.sbatch), kept as written with the line
_RAW: Final = frozenset(
    {"cpus_per_task", "cpus_per_gpu", "mem", "mem_per_cpu", "mem_per_gpu", "account",
     "constraint", "export", "output", "error", "open_mode", "signal", "ntasks", "nodes"}
)  # fmt: skip
_MAIL_UNSENT: Final = frozenset(
    {"TIME_LIMIT", "TIME_LIMIT_90", "TIME_LIMIT_80", "TIME_LIMIT_50", "INVALID_DEPEND",
     "STAGE_OUT"}
)  # fmt: skip
_GRES_GPU = re.compile(r"^gpu(?::(?P<type>[A-Za-z][A-Za-z0-9._-]*))?(?::(?P<count>\d+))?$")
_GPUS = re.compile(r"^(?:(?P<type>[A-Za-z][A-Za-z0-9._-]*):)?(?P<count>\d+)$")


def read(words: list[str], kind: Kind, where: str) -> list[str]:
    """One `#SBATCH` line's (or the command line's) options, by the table (SPEC U6)."""
    problems = []
    for opt, value, written in model.option_words(words, FLAGS):
        o = BY_NAME.get(opt)
        line = f"{where} {written}"
        if o is None:
            problems.append(f"{line}: {_unknown_sbatch(opt or written)}")
        elif o.cls == "warning":  # SPEC U6: site bookkeeping, one line per option
            kind.warnings.append(f"{line}: accepted and ignored: {o.meaning}")
        elif o.cls == "refused":
            problems.append(f"{line}: {o.meaning}; {_KEEP}")
        elif o.key == "hold":  # Q9: a flag
            kind.hold = True
        elif o.value == "none" or o.key == "wrap":  # --parsable: the command line's business
            continue
        elif value is None:
            problems.append(f"{line}: needs a value")
        elif o.key in _RAW:
            kind.raw[o.key] = (value, line)
        else:
            if o.key == "mail_type":
                value = _mail_kinds(value, line, kind)
            why = _SBATCH_VALUE[o.key](value, opt, kind)
            if o.key in ("gpus", "gres"):
                kind.raw["gpus_count"] = (value, line)
                kind.raw.pop("gpus_per_task", None)
                if opt == "--gpus-per-task":  # × the tasks, as Slurm counts (jpu.policy.sbatch)
                    kind.raw["gpus_per_task"] = (value, line)
            elif o.key == "time" and value.strip() in ("0", "0:0", "00:00:00"):
                kind.time, why = (None,), None  # SPEC U6: --time=0 is the site's maximum
                kind.raw["time_zero"] = (value, line)
            elif o.key == "partition":
                kind.raw["partition"] = (value, line)
            elif o.key == "mail_user":  # Q10: its line, for a site that sends no e-mail
                kind.raw["mail_user"] = (value, line)
            if why:
                problems.append(f"{line}: {why}")
    return problems


def _mail_kinds(value: str, line: str, kind: Kind) -> str:
    """Slurm's mail kinds the platform does not send (TIME_LIMIT*, …) are accepted with a
    warning (SPEC U6) and left out; the others are Q10's."""
    kinds = [k.strip() for k in value.split(",") if k.strip()]
    unsent = [k for k in kinds if k.upper() in _MAIL_UNSENT]
    if unsent:
        kind.warnings.append(
            f"{line}: accepted; {','.join(unsent)} mail is not sent here (BEGIN, END, FAIL, "
            "REQUEUE are)"
        )
    return ",".join(k for k in kinds if k not in unsent) or "NONE"


def refusal(word: str) -> str | None:
    """Why the sbatch option `word` (`--uid=0`) cannot be honoured, as its `#SBATCH` line says,
    when it is given to `jpu submit` on the command line (SPEC U6); None if it is not one of
    the refused sbatch options."""
    o = BY_NAME.get(word.partition("=")[0])
    return None if o is None or o.cls != "refused" else o.meaning


def _unknown_sbatch(opt: str) -> str:
    known = [o for o in BY_NAME if o.startswith("--")]
    close = difflib.get_close_matches(opt, known, n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]}?)" if close and opt.startswith("--") else ""
    return f"not an sbatch option{hint} (docs/sbatch.md lists them); {_KEEP}"


def _gpus(value: str, opt: str, kind: Kind) -> str | None:
    m = _GPUS.match(value)
    if m is None:
        return "use N or TIER:N (one GPU type per job: a job runs in one placement, SPEC P3)"
    if int(m["count"]) < 1:
        return "a job here asks for at least 1 GPU"
    kind.gpus_from["gpus"] = (int(m["count"]), m["type"])
    return None


def _gres(value: str, opt: str, kind: Kind) -> str | None:
    entries = [e for e in value.split(",") if e]
    if len(entries) != 1:
        return "one GPU request per job: --gres=gpu:N or --gres=gpu:TIER:N (SPEC P3)"
    m = _GRES_GPU.match(entries[0])
    if m is None:
        return "only GPUs can be requested: --gres=gpu, gpu:N or gpu:TIER:N"
    if m["count"] is not None and int(m["count"]) < 1:
        return "a job here asks for at least 1 GPU: --gres=gpu:1 (or drop the line)"
    kind.gpus_from["gres"] = (int(m["count"] or 1), m["type"])
    return None


def _partition(value: str, opt: str, kind: Kind) -> str | None:
    kind.partitions = [p for p in value.split(",") if p]
    return None if kind.partitions else "name a partition"


_SBATCH_VALUE: Final[Mapping[str, Reader]] = {
    "name": model.name,
    "gpus": _gpus,
    "gres": _gres,
    "time": model.time,
    "chdir": model.chdir,
    "dependency": model.dependency,
    "partition": _partition,
    "mail_type": model.mail_type,  # Q10: sent by the notifier (e-mail, webhook)
    "mail_user": model.mail_user,
    "array": model.array,
}
