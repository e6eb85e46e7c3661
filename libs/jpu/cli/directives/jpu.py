"""`#JPU` lines: `jpu submit`'s own flags, in the script. Pure."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Final

from jpu.cli.directives import model
from jpu.cli.directives.model import Kind, Reader

_JPU_OPTS: Final[Mapping[str, str]] = {
    "-G": "gpus", "--gpus": "gpus", "--tier": "tier", "-t": "time", "--time": "time",
    "-J": "name", "--name": "name", "--job-name": "name", "--env": "env",
    "--min-vram": "min_vram", "-D": "chdir", "--chdir": "chdir",
    "--mail-type": "mail_type", "--mail-user": "mail_user",
    "-d": "dependency", "--dependency": "dependency", "--hold": "hold",
    "--workspace": "workspace",
    "-a": "array", "--array": "array",
}  # fmt: skip
_JPU_VALUE: Final[Mapping[str, Reader]] = {
    "name": model.name,
    "time": model.time,
    "chdir": model.chdir,
    "dependency": model.dependency,
    "min_vram": model.min_vram,
    "mail_type": model.mail_type,  # Q10
    "mail_user": model.mail_user,
    "workspace": model.workspace,  # X4a
    "array": model.array,
}


def read(words: list[str], kind: Kind, where: str) -> list[str]:
    problems = []
    for opt, value, written in model.option_words(words, frozenset({"--hold"})):
        what = _JPU_OPTS.get(opt)
        why: str | None = None
        if what is None:
            close = difflib.get_close_matches(opt, list(_JPU_OPTS), n=1, cutoff=0.75)
            hint = f"did you mean {close[0]}? " if close else ""
            flags = ", ".join(o for o in _JPU_OPTS if o.startswith("--"))
            why = f"unknown option; {hint}#JPU takes {flags}"
        elif what == "hold":  # Q9: a flag
            kind.hold = True
        elif value is None:
            why = "needs a value"
        elif what == "tier":
            kind.tiers += [t.strip() for t in value.split(",") if t.strip()]
        elif what == "env":
            key, eq, val = value.partition("=")
            if eq and key:
                kind.env[key] = val
            else:
                why = "use --env KEY=VALUE"
        elif what == "gpus":
            if value.isdigit():
                kind.gpus_from["gpus"] = (int(value), None)
            else:
                why = "--gpus takes a number of GPUs"
        else:
            why = _JPU_VALUE[what](value, opt, kind)
        if why:
            problems.append(f"{where} {written}: {why}")
    return problems
