"""`#SBATCH` lines (and `jpu submit`'s sbatch flags), read by the one table of sbatch options
(jpu.policy.sbatch_options, SPEC U6). Pure.

Every option the table takes is kept as given, with its line (`Kind.given`): the request carries
them and intake decides what they mean, warns or refuses (jpu.domain.submission.with_sbatch).
Here they become the request's own fields (name, GPUs, time, ...); an option the table refuses,
or one it does not know, is refused here already, naming its line (jpu.policy.sbatch.refusal)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from jpu.cli.directives import model
from jpu.cli.directives.model import Kind, Reader
from jpu.policy import sbatch as policy
from jpu.policy.sbatch_options import BY_NAME, FLAGS


def read(words: list[str], kind: Kind, where: str) -> list[str]:
    """One `#SBATCH` line's (or the command line's) options, by the table (SPEC U6)."""
    problems = []
    for opt, value, written in model.option_words(words, FLAGS):
        line = f"{where} {written}"
        why = policy.refusal(opt or written)
        if why is not None:
            problems.append(f"{line}: {why}")
            continue
        o = BY_NAME[opt]
        kind.given.append((opt, value, line))  # intake decides it (SPEC U6)
        if o.cls == "warning":  # site bookkeeping: intake warns (or refuses: strict)
            continue
        if o.key == "hold":  # Q9: a flag
            kind.hold = True
        elif o.value == "none" or o.key == "wrap":  # --parsable: the command line's business
            continue
        elif value is None:
            problems.append(f"{line}: needs a value")
        elif o.key in _SBATCH_VALUE:
            if o.key == "mail_type":  # Slurm's kinds not sent here: intake warns
                value = policy.mail_kinds(value)[0]
            why = _SBATCH_VALUE[o.key](value, opt, kind)
            if o.key == "time" and value.strip() in policy.ZERO_TIME:
                kind.time, why = (None,), None  # SPEC U6: --time=0 is the site's maximum
            if why:
                problems.append(f"{line}: {why}")
    return problems


def refusal(word: str) -> str | None:
    """Why the sbatch option `word` (`--uid=0`) cannot be honoured, as its `#SBATCH` line says,
    when it is given to `jpu submit` on the command line (SPEC U6); None if it is not one of
    the refused sbatch options."""
    o = BY_NAME.get(word.partition("=")[0])
    return None if o is None or o.cls != "refused" else o.meaning


def _gpus(value: str, opt: str, kind: Kind) -> str | None:
    asked = policy.gpu_request(opt, value)
    if isinstance(asked, str):
        return asked
    kind.gpus_from[BY_NAME[opt].key] = asked
    return None


def _partition(value: str, opt: str, kind: Kind) -> str | None:
    kind.partitions = [p for p in value.split(",") if p]
    return None if kind.partitions else "name a partition"


_SBATCH_VALUE: Final[Mapping[str, Reader]] = {
    "name": model.name,
    "gpus": _gpus,
    "gres": _gpus,
    "time": model.time,
    "chdir": model.chdir,
    "dependency": model.dependency,
    "partition": _partition,
    "mail_type": model.mail_type,  # Q10: sent by the notifier (e-mail, webhook)
    "mail_user": model.mail_user,
    "array": model.array,
}
