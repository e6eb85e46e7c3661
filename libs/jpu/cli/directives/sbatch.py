"""`#SBATCH` lines: the sbatch options JPU-Share honours, and why each other one is refused
(with what to do instead). Pure."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Final

from jpu.cli.directives import model
from jpu.cli.directives.model import Kind, Reader

_KEEP = "delete the line (or write ##SBATCH to keep it as a comment)"
_OUTPUT = (
    "JPU-Share keeps each attempt's stdout and stderr itself, per attempt: read them with "
    "`jpu logs ID` (`--stderr`, `--attempt N`); "
)
_RESOURCES = (
    "CPUs and memory come with the GPUs (each tier's cpus_per_gpu and mem_gb_per_gpu, "
    "see GET /v1/tiers); ask for GPUs with --gpus; "
)
# sbatch options JPU-Share cannot honour, each with why and what to do instead.
_REFUSED: Final[Mapping[str, str]] = {
    **dict.fromkeys(("-o", "--output", "-e", "--error", "-i", "--input"), _OUTPUT + _KEEP),
    **dict.fromkeys(
        ("-c", "--cpus-per-task", "--cpus-per-gpu", "--mem", "--mem-per-cpu", "--mem-per-gpu"),
        _RESOURCES + _KEEP,
    ),
    **dict.fromkeys(
        ("-w", "--nodelist", "-x", "--exclude", "-C", "--constraint", "--exclusive"),
        "the scheduler chooses the node (fair-share, SPEC D4); restrict the GPU model with "
        "--tier instead; " + _KEEP,
    ),
    **dict.fromkeys(
        ("-A", "--account", "-q", "--qos", "--reservation", "--priority", "--nice"),
        "jobs are charged to your lab and ordered by its fair-share usage (SPEC D1); "
        "there are no accounts, QOS or priorities to choose; " + _KEEP,
    ),
    **dict.fromkeys(
        ("--gpus-per-task", "--ntasks-per-gpu", "--gpus-per-socket"),
        "use --gpus N (one task per job; start your own processes, e.g. torchrun, inside); "
        + _KEEP,
    ),
}
# sbatch options that take no value (so the next word is the next option, not their value).
_FLAGS: Final = frozenset(
    {"--exclusive", "-H", "--hold", "--requeue", "--no-requeue", "-k", "--no-kill",
     "-Q", "--quiet", "-v", "--verbose", "-W", "--wait", "--test-only", "--parsable",
     "--overcommit", "-O", "--contiguous", "--spread-job", "--use-min-nodes"}
)  # fmt: skip
_SBATCH_OPTS: Final[Mapping[str, str]] = {
    "-J": "name", "--job-name": "name", "-G": "gpus", "--gpus": "gpus",
    "--gpus-per-node": "gpus", "--gres": "gres", "-t": "time", "--time": "time",
    "-D": "chdir", "--chdir": "chdir", "-p": "partition", "--partition": "partition",
    "-N": "nodes", "--nodes": "nodes", "-n": "ntasks", "--ntasks": "ntasks",
    "--ntasks-per-node": "ntasks", "--mail-type": "mail_type", "--mail-user": "mail_user",
    "-d": "dependency", "--dependency": "dependency", "-H": "hold", "--hold": "hold",
    "-a": "array", "--array": "array",
}  # fmt: skip
_GRES_GPU = re.compile(r"^gpu(?::(?P<type>[A-Za-z][A-Za-z0-9._-]*))?(?::(?P<count>\d+))?$")
_GPUS = re.compile(r"^(?:(?P<type>[A-Za-z][A-Za-z0-9._-]*):)?(?P<count>\d+)$")
_ONE = re.compile(r"^1(?:-1)?$")  # "--nodes=1", "--nodes=1-1"


def read(words: list[str], kind: Kind, where: str) -> list[str]:
    problems = []
    for opt, value, written in model.option_words(words, _FLAGS):
        what = _SBATCH_OPTS.get(opt)
        if opt in _REFUSED:
            problems.append(f"{where} {written}: {_REFUSED[opt]}")
        elif what is None:
            problems.append(f"{where} {written}: {_unknown_sbatch(opt or written)}")
        elif what == "hold":  # Q9: a flag
            kind.hold = True
        elif value is None:
            problems.append(f"{where} {written}: needs a value")
        else:
            why = _SBATCH_VALUE[what](value, opt, kind)
            if why:
                problems.append(f"{where} {written}: {why}")
    return problems


def refusal(word: str) -> str | None:
    """Why the sbatch option `word` (`--array=0-9`, `-a`) cannot be honoured, as its `#SBATCH`
    line says, when it is given to `jpu submit` on the command line (SPEC U5); None if it is
    not one of the refused sbatch options."""
    reason = _REFUSED.get(word.partition("=")[0])
    return None if reason is None else reason.removesuffix(_KEEP).rstrip("; ")


def _unknown_sbatch(opt: str) -> str:
    known = [o for o in _SBATCH_OPTS if o.startswith("--")]
    close = difflib.get_close_matches(opt, [*known, *_REFUSED], n=1, cutoff=0.75)
    hint = f" (did you mean {close[0]}?)" if close and opt.startswith("--") else ""
    return (
        f"not supported by JPU-Share{hint}; it understands -J/--job-name, -G/--gpus, "
        f"--gres=gpu[:TIER]:N, -t/--time, -D/--chdir, -p/--partition, -N/--nodes=1, "
        f"-n/--ntasks=1, -a/--array, -d/--dependency, -H/--hold, --mail-type, --mail-user; "
        f"{_KEEP}"
    )


def _gpus(value: str, opt: str, kind: Kind) -> str | None:
    m = _GPUS.match(value)
    if m is None:
        return "use N or TIER:N (one GPU type per job: a job runs in one placement, SPEC P3)"
    kind.gpus_from["gpus"] = (int(m["count"]), m["type"])
    return None


def _gres(value: str, opt: str, kind: Kind) -> str | None:
    entries = [e for e in value.split(",") if e]
    if len(entries) != 1:
        return "one GPU request per job: --gres=gpu:N or --gres=gpu:TIER:N (SPEC P3)"
    m = _GRES_GPU.match(entries[0])
    if m is None:
        return "only GPUs can be requested: --gres=gpu, gpu:N or gpu:TIER:N"
    kind.gpus_from["gres"] = (int(m["count"] or 1), m["type"])
    return None


def _partition(value: str, opt: str, kind: Kind) -> str | None:
    kind.partitions = [p for p in value.split(",") if p]
    return None if kind.partitions else "name a partition"


def _only_one(thing: str) -> Reader:
    def check(value: str, opt: str, kind: Kind) -> str | None:
        if _ONE.match(value):
            return None
        if thing == "node":
            return (
                "a job runs on one node: every multi-GPU job runs inside one placement "
                "(same node, same tier, SPEC P3); `jpu pool` shows the largest"
            )
        return (
            "one task per job: the script runs once, on its node; start your own processes "
            "(e.g. torchrun --nproc-per-node) inside it"
        )

    return check


_SBATCH_VALUE: Final[Mapping[str, Reader]] = {
    "name": model.name,
    "gpus": _gpus,
    "gres": _gres,
    "time": model.time,
    "chdir": model.chdir,
    "dependency": model.dependency,
    "partition": _partition,
    "nodes": _only_one("node"),
    "ntasks": _only_one("task"),
    "mail_type": model.mail_type,  # Q10: sent by the notifier (e-mail, webhook)
    "mail_user": model.mail_user,
    "array": model.array,
}
